package lifecycle

import (
	"strings"
	"testing"
	"unicode/utf8"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func TestTruncateCutsAtARuneBoundaryWithinTheBound(t *testing.T) {
	for _, s := range []string{strings.Repeat("é", 300), strings.Repeat("a", 300), strings.Repeat("😀", 100), "short"} {
		got := Truncate(s, 256)
		if len(got) > 256 || !utf8.ValidString(got) {
			t.Errorf("Truncate(%d bytes) = %d bytes, valid UTF-8 %v", len(s), len(got), utf8.ValidString(got))
		}
		if len(s) <= 256 && got != s {
			t.Errorf("Truncate changed a string within the bound: %q", got)
		}
		if len(s) > 256 && !strings.HasSuffix(got, truncatedMark) {
			t.Errorf("a cut string does not end in %q: %q", truncatedMark, got)
		}
	}
}

func TestBoundNodeArtifactsLeavesTheCallersSliceAlone(t *testing.T) {
	in := []string{"a", strings.Repeat("k", 1008)}
	a := tetherv1.NodeArtifacts{Missing: in, LastError: strings.Repeat("e", 20_000)}
	BoundNodeArtifacts(&a)
	if len(a.Missing[1]) > MaxMissingPathBytes || len(a.LastError) > MaxNodeErrorBytes || a.Missing[0] != "a" {
		t.Errorf("bounded: missing %d bytes, error %d bytes", len(a.Missing[1]), len(a.LastError))
	}
	if len(in[1]) != 1008 {
		t.Error("the caller's slice was changed")
	}
}
