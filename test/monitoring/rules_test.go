package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// promtool is Debian's promtool that hack/testbin.sh extracts (make testbin).
func promtool(t *testing.T) string {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(assets, "promtool")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("promtool not found: run `make testbin` (hack/testbin.sh promtool): %v", err)
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	return out.String()
}

// ruleGroups are the groups of the PrometheusRule the kustomize component
// ships (the chart ships the same file), as a Prometheus rule file.
func ruleGroups(t *testing.T) []byte {
	t.Helper()
	var pr struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(testenv.RepoRoot(), "manifests", "overlays", "prometheus", "prometheusrule.yaml")), &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml: kind %q with %d groups", pr.Kind, len(pr.Spec.Groups))
	}
	b, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAlertRules: `promtool check rules` and `promtool test rules` on the
// alerts, with series that should and should not fire each one.
func TestAlertRules(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), ruleGroups(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), readFile(t, "testdata/alerts_test.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Log(runPromtool(t, dir, "check", "rules", "rules.yaml"))
	t.Log(runPromtool(t, dir, "test", "rules", "alerts_test.yaml"))
}

// TestChartShipsTheSameRulesAndDashboard: the chart's files/ are the
// kustomize component's, byte for byte.
func TestChartShipsTheSameRulesAndDashboard(t *testing.T) {
	root := testenv.RepoRoot()
	for _, f := range []string{"prometheusrule.yaml", "tether-dashboard.json"} {
		a := readFile(t, filepath.Join(root, "manifests", "overlays", "prometheus", f))
		b := readFile(t, filepath.Join(root, "charts", "tether", "files", f))
		if !bytes.Equal(a, b) {
			t.Errorf("charts/tether/files/%s differs from manifests/overlays/prometheus/%s: copy it", f, f)
		}
	}
}
