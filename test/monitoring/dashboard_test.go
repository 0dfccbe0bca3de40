package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// external are the metrics the dashboard may use that Tether does not
// define: Prometheus' scrape health and controller-runtime's webhook
// latency histogram, which the control plane's registry also serves.
var external = map[string]bool{"up": true, "controller_runtime_webhook_latency_seconds": true}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardQueries checks the Grafana dashboard without Grafana: it has
// the panels platform.md promises, every query parses as PromQL (promtool
// check rules, each query a recording rule once Grafana's variables are
// substituted) and names only metrics that exist.
func TestDashboardQueries(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(readFile(t, filepath.Join(testenv.RepoRoot(), "manifests", "overlays", "prometheus", "tether-dashboard.json")), &d); err != nil {
		t.Fatalf("tether-dashboard.json: %v", err)
	}
	var titles []string
	var rules []map[string]string
	names := exportedNames(t, collectors(t))
	vars := strings.NewReplacer("$namespace", ".*", "${datasource}", "")
	for i, p := range d.Panels {
		titles = append(titles, p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for j, tg := range p.Targets {
			expr := vars.Replace(tg.Expr)
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:panel%d:query%d", i+1, j), "expr": expr})
			for _, m := range metricNames(expr) {
				if !names[m] && !external[m] {
					t.Errorf("panel %q: %s is not a metric Tether exports (query %s)", p.Title, m, tg.Expr)
				}
			}
		}
	}
	for _, want := range []string{"Jobs by phase", "Heartbeat age", "Progress", "Upload bytes/s", "Upload failures",
		"Admission latency (p99)", "Admission outcomes", "Certificate expiry", "Ready replicas"} {
		if !slices.Contains(titles, want) {
			t.Errorf("dashboard has no panel %q (panels: %v)", want, titles)
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Log(runPromtool(t, dir, "check", "rules", "dashboard.yaml"))
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers   = regexp.MustCompile(`\{[^}]*\}`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ranges     = regexp.MustCompile(`\[[^\]]*\]`)
	durations  = regexp.MustCompile(`\b[0-9.]+(?:ms|[smhdwy])\b`)
	identifier = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?`)
	keywords   = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "bool": true, "and": true, "or": true,
		"unless": true, "offset": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

// metricNames are the metric names a PromQL expression selects: identifiers
// that are not functions, aggregations or keywords, outside strings, label
// matchers, groupings and ranges; a histogram's _bucket/_sum/_count series
// name their histogram.
func metricNames(expr string) []string {
	s := durations.ReplaceAllString(ranges.ReplaceAllString(grouping.ReplaceAllString(matchers.ReplaceAllString(quoted.ReplaceAllString(expr, `""`), " "), " "), " "), " ")
	var out []string
	for _, m := range identifier.FindAllStringSubmatch(s, -1) {
		id := m[1]
		if m[2] != "" || keywords[strings.ToLower(id)] {
			continue // a function or aggregation call, or a keyword
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if n, ok := strings.CutSuffix(id, suffix); ok && external[n] {
				id = n
			}
		}
		out = append(out, id)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (le, webhook) (rate(controller_runtime_webhook_latency_seconds_bucket{job="x"}[5m]))) - on (a) tether_x offset 5m`)
	if want := []string{"controller_runtime_webhook_latency_seconds", "tether_x"}; !slices.Equal(got, want) {
		t.Fatalf("metricNames: %v, want %v", got, want)
	}
}
