package bindingserver

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/pkg/binding"
)

func TestHeartbeatWritePacing(t *testing.T) {
	b := types.NamespacedName{Namespace: "ns", Name: "job"}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	vouched := paceRules{status: 30 * time.Second, liveness: 10 * time.Minute, vouched: true, replica: "tether-binding-a-1"}
	alone := paceRules{status: 30 * time.Second, liveness: 10 * time.Minute}
	at := t0.Add

	h := newHub()
	steps := []struct {
		name                    string
		at                      time.Duration
		urgent, opened, changed bool
		rules                   paceRules
		want                    writeDecision
		take                    bool // the pacer gives the binding its turn right after
	}{
		{name: "first heartbeat of a session", at: 0, opened: true, rules: vouched, want: writeNow},
		// A session opened again right after a write costs none.
		{name: "a new session 2s later", at: 2 * time.Second, opened: true, rules: vouched, want: writeNone},
		{name: "another, 4s later", at: 4 * time.Second, opened: true, rules: vouched, want: writeNone},
		{name: "quiet, 10s later", at: 10 * time.Second, rules: vouched, want: writeNone},
		{name: "progress changed before the status interval", at: 20 * time.Second, changed: true, rules: vouched, want: writeNone},
		{name: "quiet, but the change (and the new sessions) still unwritten past the status interval", at: 31 * time.Second, rules: vouched, want: writePaced, take: true},
		{name: "quiet after that write", at: 5 * time.Minute, rules: vouched, want: writeNone},
		{name: "liveness alone, past the liveness interval", at: 31*time.Second + 10*time.Minute, rules: vouched, want: writePaced},
		{name: "already waiting in the pacer", at: 31*time.Second + 10*time.Minute + 10*time.Second, changed: true, rules: vouched, want: writeNone, take: true},
		{name: "a transition is never paced", at: 12 * time.Minute, urgent: true, rules: vouched, want: writeNow},
		{name: "the Lease lost: written at once without its name", at: 12*time.Minute + 5*time.Second, rules: alone, want: writeNow},
		{name: "without a Lease, quiet within the status interval", at: 12*time.Minute + 20*time.Second, rules: alone, want: writeNone},
		{name: "without a Lease, liveness alone every status interval, unpaced", at: 12*time.Minute + 36*time.Second, rules: alone, want: writeNow},
		{name: "the Lease back: written at once with its name", at: 12*time.Minute + 40*time.Second, rules: vouched, want: writeNow},
	}
	for _, s := range steps {
		got := h.noteHeartbeat(b, at(s.at), s.urgent, s.opened, s.changed, s.rules)
		if got != s.want {
			t.Fatalf("%s: decision %d, want %d", s.name, got, s.want)
		}
		if s.take && !h.takePaced(b, at(s.at), s.rules) {
			t.Fatalf("%s: the pacer found the binding no longer due", s.name)
		}
	}

	// A new session past the status interval since this replica's last
	// write, or after another replica's (the Lease differs), is written at once.
	h = newHub()
	h.noteHeartbeat(b, at(0), false, true, false, vouched)
	if d := h.noteHeartbeat(b, at(31*time.Second), false, true, false, vouched); d != writeNow {
		t.Fatalf("a session opened past the status interval: decision %d, want now", d)
	}
	other := vouched
	other.replica = "tether-binding-b-1"
	if d := h.noteHeartbeat(b, at(32*time.Second), false, true, false, other); d != writeNow {
		t.Fatalf("a session opened on another replica: decision %d, want now", d)
	}

	// A transition written while the binding waited: its turn writes nothing.
	h = newHub()
	h.noteHeartbeat(b, at(0), true, false, false, vouched)
	if d := h.noteHeartbeat(b, at(11*time.Minute), false, false, false, vouched); d != writePaced {
		t.Fatalf("decision %d, want paced", d)
	}
	h.noteHeartbeat(b, at(11*time.Minute+time.Second), true, false, false, vouched)
	if h.takePaced(b, at(11*time.Minute+2*time.Second), vouched) {
		t.Fatal("the pacer wrote a binding a transition had just written")
	}
}

func TestPacedQueueIsFIFOAndEndsWithContext(t *testing.T) {
	q := newPacedQueue()
	names := []string{"a", "b", "c"}
	for _, n := range names {
		q.push(types.NamespacedName{Namespace: "ns", Name: n})
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, n := range names {
		got, ok := q.pop(ctx)
		if !ok || got.Name != n {
			t.Fatalf("pop: %v %v, want %s", got, ok, n)
		}
	}
	if q.len() != 0 {
		t.Fatalf("len %d after popping everything", q.len())
	}
	cancel()
	if _, ok := q.pop(ctx); ok {
		t.Fatal("pop returned an entry from an empty queue after its context ended")
	}
}

func TestProgressChanged(t *testing.T) {
	step := func(n int64) *binding.Progress { return &binding.Progress{Step: &n} }
	for _, c := range []struct {
		name      string
		last, now *binding.Progress
		want      bool
	}{
		{"no progress reported", step(1), nil, false},
		{"first progress", nil, step(1), true},
		{"same step", step(5), step(5), false},
		{"next step", step(5), step(6), true},
	} {
		if got := progressChanged(c.last, c.now); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
