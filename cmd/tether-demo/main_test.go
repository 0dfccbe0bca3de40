package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// `make demo` builds hack/testbin.sh's demo group and nothing else, so the
// group must be exactly what the demo's cluster execs: a component missing
// from it fails the first demo on a fresh machine, one too many costs its
// cold build (containerd, the kubelet: minutes) for nothing.
func TestTestbinDemoGroupIsWhatTheDemoRuns(t *testing.T) {
	out, err := exec.Command("bash", "../../hack/testbin.sh", "--print-group", "demo").Output()
	if err != nil {
		t.Fatalf("hack/testbin.sh --print-group demo: %v", err)
	}
	group := strings.Fields(string(out))
	want := clusterOptions().Components()
	slices.Sort(group)
	slices.Sort(want)
	if !slices.Equal(group, want) {
		t.Errorf("hack/testbin.sh's demo group is %v; the demo's cluster (localcluster.Options.Components) runs %v", group, want)
	}
}
