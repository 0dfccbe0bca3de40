package jobconfig

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/tether-dev/tether/api/names"
)

// FuzzParse: any annotation values are either settings within their
// bounds, or one *InvalidAnnotationError per bad annotation, each naming the
// annotation, its value and an example.
func FuzzParse(f *testing.F) {
	f.Add("/workspace/artifacts", "**/*.pt", "*.tmp", "10s", "node", "ghcr.io/tether-dev/tether-sidecar:v0.1.0", "llama-0042", "model/*.safetensors,config.json")
	f.Add("relative", "[", "{a,b", "0s", "Node_1", "UPPER:tag", "bad id!", "../x,/abs,a//b,./c,")
	f.Add("/var/run/tether/x", "", ",", "5m1s", "", "", "", "")
	f.Add("/out", "*", "x", "1s", "node", "busybox", "a", "nodes/1/**/*.{pt,bin}, [,;]x")
	f.Fuzz(func(t *testing.T, path, include, exclude, interval, container, image, jobID, require string) {
		ann := map[string]string{names.ArtifactPathAnnotation: path, names.IncludeAnnotation: include, names.ExcludeAnnotation: exclude,
			names.HeartbeatIntervalAnnotation: interval, names.TrainerContainerAnnotation: container, names.SidecarImageAnnotation: image, names.JobIDAnnotation: jobID,
			names.RequireAnnotation: require}
		s, err := Parse(ann)
		if err != nil {
			var joined interface{ Unwrap() []error }
			if !errors.As(err, &joined) {
				t.Fatalf("error %v is not a list of annotation errors", err)
			}
			for _, e := range joined.Unwrap() {
				var ie *InvalidAnnotationError
				if !errors.As(e, &ie) || ie.Key == "" || ie.Problem == "" || ie.Example == "" || !strings.Contains(e.Error(), ie.Key) {
					t.Fatalf("error %q does not name the annotation, its problem and an example", e)
				}
				if _, ok := ann[ie.Key]; !ok {
					t.Fatalf("error names %s, which was not set", ie.Key)
				}
			}
			return
		}
		if s.HeartbeatInterval < MinHeartbeatInterval || s.HeartbeatInterval > MaxHeartbeatInterval {
			t.Fatalf("interval %s accepted", s.HeartbeatInterval)
		}
		if s.ArtifactPath != path || s.TrainerContainer != container || s.SidecarImage != image {
			t.Fatalf("settings %+v do not hold the annotations' values", s)
		}
		if len(s.Require) == 0 || len(s.Require) > MaxRequireGlobs {
			t.Fatalf("require %q accepted as %d globs", require, len(s.Require))
		}
		for _, g := range s.Require {
			if g == "" || len(g) > MaxRequireGlobBytes || strings.HasPrefix(g, "/") || slices.Contains(strings.Split(g, "/"), "..") || !doublestar.ValidatePattern(g) {
				t.Fatalf("required glob %q accepted", g)
			}
		}
		if again, err := Parse(ann); err != nil || again.HeartbeatInterval != s.HeartbeatInterval {
			t.Fatalf("Parse is not deterministic: %v", err)
		}
	})
}
