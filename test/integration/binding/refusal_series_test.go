package binding

import (
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
)

// The control plane exports every refusal the artifact endpoint can answer
// from its start, at 0 until one happens: TetherUploadFailures alerts on
// increase(tether_binding_refusals_total{reason=~"artifact_.*"}[10m]), and
// increase() sees nothing in a series that first appears at 1, so the first
// refusal of a kind (often the only one) was never alerted on.
func TestArtifactRefusalSeriesStartAtZero(t *testing.T) {
	exported := map[string]bool{}
	for _, l := range metrics(t, "tether_binding_refusals_total") {
		if rest, ok := strings.CutPrefix(l, `tether_binding_refusals_total{reason="`); ok {
			if reason, _, ok := strings.Cut(rest, `"`); ok {
				exported[reason] = true
			}
		}
	}
	for _, r := range endpoint.RefusalReasons() {
		if !exported["artifact_"+r] {
			t.Errorf("tether_binding_refusals_total{reason=%q} is not exported before its first refusal", "artifact_"+r)
		}
	}
}
