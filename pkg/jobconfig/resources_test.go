package jobconfig

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestSidecarResourceAnnotations(t *testing.T) {
	s, err := Parse(map[string]string{SidecarRequestsAnnotation: "cpu=100m, memory=128Mi", SidecarLimitsAnnotation: "memory=256Mi"})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.SidecarRequests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("100m")) != 0 {
		t.Errorf("cpu request %s, want 100m", got.String())
	}
	if got := s.SidecarLimits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("256Mi")) != 0 || len(s.SidecarLimits) != 1 {
		t.Errorf("limits %v, want memory=256Mi only", s.SidecarLimits)
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
		{map[string]string{SidecarRequestsAnnotation: "cpu"}, `annotation tether.dev/sidecar-requests="cpu" is invalid: "cpu" is not name=quantity (example: tether.dev/sidecar-requests: "cpu=100m,memory=128Mi")`},
		{map[string]string{SidecarRequestsAnnotation: "nvidia.com/gpu=1"}, `resource "nvidia.com/gpu": must be cpu, memory or ephemeral-storage`},
		{map[string]string{SidecarLimitsAnnotation: "memory=lots"}, `memory=lots: not a quantity (example: tether.dev/sidecar-limits: "cpu=2,memory=256Mi")`},
		{map[string]string{SidecarLimitsAnnotation: "cpu=0"}, "cpu=0: must be positive"},
		{map[string]string{SidecarLimitsAnnotation: "cpu=1,cpu=2"}, "resource cpu given twice"},
		{map[string]string{SidecarRequestsAnnotation: "memory=1Gi", SidecarLimitsAnnotation: "memory=256Mi"},
			"memory request 1Gi exceeds its limit 256Mi (tether.dev/sidecar-limits=memory=256Mi)"},
	} {
		_, err := Parse(tc.annotations)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%v) = %v, want an error containing %q", tc.annotations, err, tc.want)
		}
	}
}

func TestMergeResources(t *testing.T) {
	base := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	}
	got, err := MergeResources(base, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := got.Requests[corev1.ResourceMemory]; m.String() != "100Mi" {
		t.Errorf("merged memory request %s", m.String())
	}
	if c := got.Requests[corev1.ResourceCPU]; c.String() != "50m" || base.Requests.Memory().String() != "64Mi" {
		t.Errorf("merge changed what it should keep: %v, base %v", got.Requests, base.Requests)
	}
	if _, err := MergeResources(base, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}, nil); err == nil ||
		!strings.Contains(err.Error(), "memory request 512Mi exceeds its limit 128Mi") {
		t.Errorf("request over the default limit: %v", err)
	}
}
