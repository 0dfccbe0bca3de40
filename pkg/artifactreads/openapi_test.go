package artifactreads

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	openapiv3 "github.com/google/gnostic-models/openapiv3"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// TestOpenAPIDocument: the read API's document is OpenAPI 3.0 as a
// parser of the specification reads it (gnostic, the parser the API
// server's protobuf answer uses), every $ref resolves, every path
// parameter is declared, and the read path is the one the handler parses.
func TestOpenAPIDocument(t *testing.T) {
	raw, err := json.Marshal(OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapiv3.ParseDocument(raw)
	if err != nil {
		t.Fatalf("not an OpenAPI 3 document: %v\n%s", err, raw)
	}
	if !strings.HasPrefix(doc.GetOpenapi(), "3.0.") {
		t.Errorf("openapi %q, want 3.0.x", doc.GetOpenapi())
	}

	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	schemas := generic["components"].(map[string]any)["schemas"].(map[string]any)
	for _, m := range regexp.MustCompile(`"\$ref":"([^"]*)"`).FindAllStringSubmatch(string(raw), -1) {
		name, ok := strings.CutPrefix(m[1], "#/components/schemas/")
		if _, found := schemas[name]; !ok || !found {
			t.Errorf("$ref %s resolves to nothing in components.schemas", m[1])
		}
	}

	var objects *openapiv3.PathItem
	for _, p := range doc.GetPaths().GetPath() {
		if p.GetName() == ObjectsPathTemplate {
			objects = p.GetValue()
		}
	}
	if objects == nil || objects.GetGet() == nil {
		t.Fatalf("no GET %s in the document", ObjectsPathTemplate)
	}
	var declared []string
	for _, p := range objects.GetParameters() {
		declared = append(declared, p.GetParameter().GetName())
	}
	for _, m := range regexp.MustCompile(`\{([^}]*)\}`).FindAllStringSubmatch(ObjectsPathTemplate, -1) {
		if !slices.Contains(declared, m[1]) {
			t.Errorf("path parameter {%s} is not declared (declared: %v)", m[1], declared)
		}
	}
	get := objects.GetGet()
	if ps := get.GetParameters(); len(ps) != 1 || ps[0].GetParameter().GetName() != names.HeaderStream || ps[0].GetParameter().GetIn() != "header" {
		t.Errorf("GET parameters %v, want the header %s", ps, names.HeaderStream)
	}
	codes := map[string]bool{}
	for _, r := range get.GetResponses().GetResponseOrReference() {
		codes[r.GetName()] = true
	}
	for _, c := range []string{"200", "400", "401", "403", "404", "409", "429", "502", "503"} {
		if !codes[c] {
			t.Errorf("no response %s described (described: %v)", c, codes)
		}
	}

	// The template, filled in, is a path the handler serves.
	filled := strings.NewReplacer("{namespace}", "team-a", "{name}", "llm", "{path}", "nodes/1/manifest.json").Replace(ObjectsPathTemplate)
	ns, name, rel, err := parseReadPath(tetherv1.ReadAPIPathPrefix, filled)
	if err != nil || ns != "team-a" || name != "llm" || rel != "nodes/1/manifest.json" {
		t.Errorf("the handler parses %s as %q %q %q (%v), want team-a llm nodes/1/manifest.json", filled, ns, name, rel, err)
	}
}
