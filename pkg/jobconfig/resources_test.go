package jobconfig

import (
	"maps"
	"strings"
	"testing"

	"github.com/tether-dev/tether/api/names"
)

func TestSidecarResourceAnnotations(t *testing.T) {
	s, err := Parse(map[string]string{names.SidecarRequestsAnnotation: "cpu=100m, memory=128Mi", names.SidecarLimitsAnnotation: "memory=0.25Gi"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"cpu": "100m", "memory": "128Mi"}; !maps.Equal(s.SidecarRequests, want) {
		t.Errorf("requests %v, want %v", s.SidecarRequests, want)
	}
	if want := map[string]string{"memory": "0.25Gi"}; !maps.Equal(s.SidecarLimits, want) {
		t.Errorf("limits %v, want %v", s.SidecarLimits, want)
	}
	if s, _ := Parse(nil); s.SidecarRequests != nil || s.SidecarLimits != nil {
		t.Errorf("no annotation: %v %v, want nil (the control plane's defaults)", s.SidecarRequests, s.SidecarLimits)
	}
}

func TestSidecarResourceAnnotationsInvalid(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{names.SidecarRequestsAnnotation: "cpu"}, `annotation tether.dev/sidecar-requests="cpu" is invalid: "cpu" is not name=quantity (example: tether.dev/sidecar-requests: "cpu=100m,memory=128Mi")`},
		{map[string]string{names.SidecarRequestsAnnotation: "nvidia.com/gpu=1"}, `resource "nvidia.com/gpu": must be cpu, memory or ephemeral-storage`},
		{map[string]string{names.SidecarLimitsAnnotation: "memory=lots"}, `memory=lots: not a quantity (e.g. 100m, 0.5, 128Mi, 1G) (example: tether.dev/sidecar-limits: "cpu=2,memory=256Mi")`},
		{map[string]string{names.SidecarLimitsAnnotation: "memory=-1Gi"}, "memory=-1Gi: not a quantity"},
		{map[string]string{names.SidecarLimitsAnnotation: "cpu=0"}, "cpu=0: must be positive"},
		{map[string]string{names.SidecarLimitsAnnotation: "cpu=0.0m"}, "cpu=0.0m: must be positive"},
		{map[string]string{names.SidecarLimitsAnnotation: "cpu=1,cpu=2"}, "resource cpu given twice"},
	} {
		_, err := Parse(tc.annotations)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%v) = %v, want an error containing %q", tc.annotations, err, tc.want)
		}
	}
}
