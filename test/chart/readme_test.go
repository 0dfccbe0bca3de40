package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestREADMEListsEveryValue: charts/tether/README.md has a row for every
// leaf of values.yaml with its default (as JSON), and no row for a value that
// is gone.
func TestREADMEListsEveryValue(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	flatten("", values, want)
	readme, err := os.ReadFile(filepath.Join(chartDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\| `([^`]*)` \\|").FindAllStringSubmatch(string(readme), -1) {
		got[m[1]] = m[2]
	}
	for _, k := range keys(want) {
		switch g, ok := got[k]; {
		case !ok:
			t.Errorf("README.md lacks value %s (default `%s`)", k, want[k])
		case g != want[k]:
			t.Errorf("README.md gives %s the default `%s`; values.yaml has `%s`", k, g, want[k])
		}
	}
	for _, k := range keys(got) {
		if _, ok := want[k]; !ok {
			t.Errorf("README.md lists %s, which values.yaml does not have", k)
		}
	}
	if len(want) < 20 || !slices.Contains(keys(want), "certMode") {
		t.Fatalf("values.yaml flattened to %d values: the test reads it wrong", len(want))
	}
}

// flatten writes every leaf of v (an empty map is a leaf) as its JSON.
func flatten(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, x := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, x, out)
		}
		return
	}
	b, _ := json.Marshal(v)
	out[prefix] = string(b)
}
