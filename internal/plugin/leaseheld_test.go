package plugin

import (
	"testing"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func TestLeaseHeldSaysLiveOnlyWhenTrue(t *testing.T) {
	held := tetherv1.NodeStatus{Rank: 0, SessionReplica: "tether-binding-a-1234"}
	for _, c := range []struct {
		name string
		st   tetherv1.WorkerBindingStatus
		want bool
	}{
		{"running, held", tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning, Nodes: []tetherv1.NodeStatus{held}}, true},
		{"running, no replica recorded", tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning, Nodes: []tetherv1.NodeStatus{{Rank: 0}}}, false},
		{"a node lost", tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning,
			Nodes: []tetherv1.NodeStatus{held, {Rank: 1, SessionReplica: "x", HeartbeatLost: true}}}, false},
		{"finished", tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseSucceeded, Nodes: []tetherv1.NodeStatus{held}}, false},
	} {
		if got := leaseHeld(&c.st); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
