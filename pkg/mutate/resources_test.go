package mutate

import (
	"strings"
	"testing"
)

func TestMergeResources(t *testing.T) {
	base := DefaultSidecarResources()
	got, err := MergeResources(base, map[string]string{"memory": "100Mi"}, map[string]string{"cpu": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Requests.Memory().String() != "100Mi" || got.Requests.Cpu().String() != "50m" || got.Limits.Cpu().String() != "2" || got.Limits.Memory().String() != "128Mi" {
		t.Errorf("merged %v", got)
	}
	if base.Requests.Memory().String() != "64Mi" {
		t.Errorf("merge changed the defaults: %v", base.Requests)
	}
	if _, err := MergeResources(base, map[string]string{"memory": "512Mi", "cpu": "2"}, nil); err == nil ||
		!strings.Contains(err.Error(), "cpu request 2 exceeds its limit 1; memory request 512Mi exceeds its limit 128Mi") {
		t.Errorf("requests over the default limits: %v", err)
	}
}
