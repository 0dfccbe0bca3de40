package localcluster

import (
	"slices"
	"testing"
)

// Components follows the options: the Trainer's version picks its binary,
// Kueue and the real node add theirs, and a kwok-only cluster needs no
// node binary (what keeps `make demo` from building them).
func TestComponentsFollowOptions(t *testing.T) {
	kwok := Options{Kueue: true}.Components()
	for _, c := range []string{"kube-apiserver", "etcd", "kubectl", "kube-controller-manager", "kube-scheduler", "kwok", "jobset", "trainer-controller-manager", "kueue"} {
		if !slices.Contains(kwok, c) {
			t.Errorf("Options{Kueue: true}.Components() = %v lacks %s", kwok, c)
		}
	}
	for _, c := range []string{"kubelet", "containerd", "runc", "cni-plugins", "trainer-controller-manager-" + TrainerV20, "versitygw"} {
		if slices.Contains(kwok, c) {
			t.Errorf("Options{Kueue: true}.Components() = %v has %s, which a kwok-only cluster never runs", kwok, c)
		}
	}
	v20 := Options{TrainerVersion: TrainerV20}.Components()
	if !slices.Contains(v20, "trainer-controller-manager-"+TrainerV20) || slices.Contains(v20, "trainer-controller-manager") || slices.Contains(v20, "kueue") {
		t.Errorf("Options{TrainerVersion: v2.0.0}.Components() = %v", v20)
	}
	withRealNode := Options{RealNode: true}.Components()
	for _, c := range []string{"kubelet", "containerd", "runc", "cni-plugins"} {
		if !slices.Contains(withRealNode, c) {
			t.Errorf("Options{RealNode: true}.Components() = %v lacks %s", withRealNode, c)
		}
	}
}
