package mutate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestDeniedSeriesExistBeforeAnyDenial: the denied series of the three
// webhooks are exported (at 0 until a denial) from the start, so a
// replica's first denial is an increase Prometheus sees; deniedReasons
// names every Deny* reason of outcome.go, so a new one is not left out.
func TestDeniedSeriesExistBeforeAnyDenial(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "outcome.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []Reason
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if !strings.HasPrefix(n.Name, "Deny") || i >= len(v.Values) {
					continue
				}
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok {
					t.Fatalf("outcome.go: %s is not a string literal", n.Name)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				declared = append(declared, Reason(s))
			}
		}
	}
	for _, r := range declared {
		if !slices.Contains(deniedReasons, r) {
			t.Errorf("deniedReasons lacks %s (outcome.go): its first denial would not raise TetherAdmissionDenied", r)
		}
	}
	if len(declared) != len(deniedReasons) {
		t.Errorf("outcome.go declares %d denial reasons, deniedReasons lists %d", len(declared), len(deniedReasons))
	}

	for _, c := range []struct {
		what   string
		vec    *prometheus.CounterVec
		labels []map[string]string
	}{
		{"tether_trainjob_admissions_total", trainJobAdmissions, []map[string]string{{"outcome": "denied"}}},
		{"tether_jobset_admissions_total", jobSetAdmissions, []map[string]string{{"outcome": "denied"}}},
		{"tether_pod_admissions_total", podAdmissions, func() (ls []map[string]string) {
			for _, r := range declared {
				ls = append(ls, map[string]string{"outcome": string(OutcomeDenied), "reason": string(r)})
			}
			return ls
		}()},
	} {
		have := collectLabels(t, c.vec)
		for _, want := range c.labels {
			if !slices.ContainsFunc(have, func(h map[string]string) bool { return maps.Equal(h, want) }) {
				t.Errorf("%s has no series %v before any denial (has %v)", c.what, want, have)
			}
		}
	}
}

func collectLabels(t *testing.T, c prometheus.Collector) []map[string]string {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	var out []map[string]string
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		ls := map[string]string{}
		for _, l := range d.GetLabel() {
			ls[l.GetName()] = l.GetValue()
		}
		out = append(out, ls)
	}
	return out
}
