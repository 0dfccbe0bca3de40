package artifactreads

import (
	"strings"
	"testing"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func TestParseReadPath(t *testing.T) {
	ns, name, rel, err := parseReadPath(tetherv1.ReadPathPrefix, tetherv1.ReadPathPrefix+"team-a/workerbindings/llm.v2/objects/nodes/1/ckpt/step 100.pt")
	if err != nil || ns != "team-a" || name != "llm.v2" || rel != "nodes/1/ckpt/step 100.pt" {
		t.Fatalf("parseReadPath = %q %q %q %v", ns, name, rel, err)
	}
	for path, want := range map[string]string{
		tetherv1.ReadPathPrefix + "team-a/workerbindings/llm/objects/":                     "use " + tetherv1.ReadPathPrefix,
		tetherv1.ReadPathPrefix + "team-a/workerbindings/llm":                              "use " + tetherv1.ReadPathPrefix,
		tetherv1.ReadPathPrefix + "team-a/trainjobs/llm/objects/a":                         "use " + tetherv1.ReadPathPrefix,
		tetherv1.ReadPathPrefix + "Team_A/workerbindings/llm/objects/a":                    `namespace "Team_A"`,
		tetherv1.ReadPathPrefix + "team-a/workerbindings/LLM/objects/a":                    `WorkerBinding name "LLM"`,
		tetherv1.ReadPathPrefix + strings.Repeat("a", 300) + "/workerbindings/x/objects/a": "namespace",
	} {
		_, _, _, err := parseReadPath(tetherv1.ReadPathPrefix, path)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseReadPath(%.60q) = %v, want an error containing %q", path, err, want)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("error for a long path is %d bytes: bounded inputs give bounded errors", len(err.Error()))
		}
	}
}
