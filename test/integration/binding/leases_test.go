package binding

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/sidecar/session"
)

// The detection bounds these tests hold the control plane to
// (docs/protocol.md, Liveness): a worker silent on a live replica is
// HeartbeatLost missedHeartbeats × heartbeatInterval after its last
// heartbeat; a worker whose replica died is lost missedHeartbeats ×
// heartbeatInterval plus one renewal period (a third of the Lease's
// duration) after the later of its last recorded heartbeat and the replica
// Lease's last renewal, or when that Lease expires if later.
const (
	missed         = 3
	testHeartbeat  = time.Second
	testLease      = 6 * time.Second
	leasePoll      = time.Second // replicaleases' replicaLeasePoll
	livenessPeriod = time.Second // pkg/bindingserver's liveness check
	// detectionSlack covers a reconcile, a status write and the test's
	// polling on a shared machine; the bound itself is what docs promise.
	detectionSlack = 4 * time.Second
)

// lostSince polls the binding until its node 0 is HeartbeatLost and returns
// when that was first seen, failing after deadline.
func lostSince(t *testing.T, j *job, deadline time.Time) (*tetherv1.WorkerBinding, time.Time) {
	t.Helper()
	for {
		wb := j.binding(t)
		if meta.IsStatusConditionTrue(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost) {
			return wb, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("not HeartbeatLost by the documented bound (+%s slack): phase %s/%s, nodes %+v",
				detectionSlack, wb.Status.Phase, wb.Status.Reason, wb.Status.Nodes)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastAckWatch notes when the client's acknowledged sequence last moved
// (polled every 10ms) and returns a reader of that time.
func lastAckWatch(c *session.Client) func() time.Time {
	var mu sync.Mutex
	seq, at := c.LastAckedSeq(), time.Now()
	stop := time.Now().Add(time.Minute)
	go func() {
		for time.Now().Before(stop) {
			if s := c.LastAckedSeq(); s != seq {
				mu.Lock()
				seq, at = s, time.Now()
				mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return at
	}
}

// TestHeldWorkerLostWhenItsReplicaDies: a worker's session is held by a
// second replica whose Lease vouches for it. While that replica lives, the
// binding is written rarely (its recorded heartbeat ages past the old
// StatusInterval + 3 intervals budget) and the worker is not lost. Then the
// replica dies, taking the session with it: its Lease stops being renewed,
// and the elected replica's controller records HeartbeatLost within the
// documented bound, naming the replica.
func TestHeldWorkerLostWhenItsReplicaDies(t *testing.T) {
	ctx := context.Background()
	replica, err := env.StartReplica(ctx, func(o *controlplane.Options) {
		o.ReplicaLeaseDuration = testLease
		o.ReplicaName = "tether-binding-test-dies"
		o.LivenessWriteInterval = bindingserver.DefaultLivenessWriteInterval // production: liveness in memory
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = replica.Stop()
		}
	}()

	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: testHeartbeat.String()})
	cfg := j.clientConfig()
	cfg.ServerURL = replica.BindingURL // the worker reaches this replica only
	c, _, _ := runningClient(t, cfg)
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	var first *tetherv1.NodeStatus
	eventually(t, 10*time.Second, func() error {
		n := j.binding(t).Status.Nodes
		if len(n) != 1 || n[0].SessionReplica != "tether-binding-test-dies" || n[0].LastHeartbeatTime == nil {
			return fmt.Errorf("node 0 not recorded as held by the replica's Lease: %+v", n)
		}
		first = &n[0]
		return nil
	})
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "tether-system", Name: "tether-binding-test-dies"}, lease); err != nil {
		t.Fatalf("the replica's Lease: %v", err)
	}

	// Past StatusInterval (2s) + 3 × 1s with no status write: the Lease
	// vouches, so no HeartbeatLost, and the recorded heartbeat stays put
	// while the replica acknowledges every heartbeat.
	seq := c.LastAckedSeq()
	lastAck := lastAckWatch(c)
	consistently(t, 7*time.Second, func() error {
		wb := j.binding(t)
		if meta.IsStatusConditionTrue(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost) {
			return fmt.Errorf("HeartbeatLost while the holding replica lives: %s", wb.Status.Message)
		}
		return nil
	})
	if c.LastAckedSeq() < seq+5 {
		t.Fatalf("acks stopped: seq %d then %d", seq, c.LastAckedSeq())
	}
	if n := j.binding(t).Status.Nodes[0]; !n.LastHeartbeatTime.Equal(first.LastHeartbeatTime) {
		t.Errorf("liveness-only status written within 7s (last heartbeat %s, first %s): want it in memory only",
			n.LastHeartbeatTime, first.LastHeartbeatTime)
	}

	// The replica dies: no more renewals, no more acks.
	if err := replica.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	died := time.Now()
	bound := max(missed*testHeartbeat+testLease/3, testLease) + leasePoll
	wb, lostAt := lostSince(t, j, died.Add(bound+detectionSlack))
	t.Logf("HeartbeatLost %.1fs after the holding replica stopped (bound %s after its last renewal): %s",
		lostAt.Sub(died).Seconds(), bound, wb.Status.Message)
	if early := lastAck().Add(missed * testHeartbeat); lostAt.Before(early) {
		t.Errorf("HeartbeatLost at %s, before 3 intervals of silence after the last ack (%s)", lostAt, early)
	}
	c0 := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost)
	if !strings.Contains(c0.Message, "tether-binding-test-dies") || wb.Status.Reason != tetherv1.ReasonHeartbeatLost {
		t.Errorf("condition %q (reason %s): want it to name the replica that held the session", c0.Message, wb.Status.Reason)
	}
}

// TestSilentWorkerLostOnLiveReplica: a worker that keeps its connection but
// stops sending heartbeats is HeartbeatLost by the replica holding it within
// 3 intervals (plus the liveness check), and the binding records the last
// heartbeat that replica heard, not an older written one.
func TestSilentWorkerLostOnLiveReplica(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: testHeartbeat.String()})
	p := newRawPeer(t, j)
	if code, e := p.register(p.headers(), p.registerBody()); code != 200 {
		t.Fatalf("register: %d %+v", code, e)
	}
	conn := p.dial()
	defer conn.Close()
	acks := make(chan uint64, 16)
	go func() {
		for {
			var f binding.Frame
			if err := conn.ReadJSON(&f); err != nil {
				close(acks)
				return
			}
			if f.Type == binding.FrameAck {
				acks <- f.Ack.Seq
			}
		}
	}()
	var last time.Time
	for seq := uint64(1); seq <= 4; seq++ {
		last = time.Now()
		if err := conn.WriteJSON(binding.Frame{Type: binding.FrameHeartbeat, Heartbeat: &binding.Heartbeat{Seq: seq, SentAt: last}}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-acks:
			if got != seq {
				t.Fatalf("ack %d, want %d", got, seq)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("heartbeat %d not acknowledged", seq)
		}
		time.Sleep(testHeartbeat)
	}
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	// Silence, connection open.
	wb, lostAt := lostSince(t, j, last.Add(missed*testHeartbeat+livenessPeriod+detectionSlack))
	t.Logf("HeartbeatLost %.1fs after the last heartbeat (bound %s): %s", lostAt.Sub(last).Seconds(), missed*testHeartbeat, wb.Status.Message)
	if early := last.Add(missed * testHeartbeat); lostAt.Before(early) {
		t.Errorf("HeartbeatLost at %s, before 3 intervals of silence (%s)", lostAt, early)
	}
	n := wb.Status.Nodes[0]
	if n.LastHeartbeatTime == nil || n.LastHeartbeatTime.Sub(last).Abs() > time.Second {
		t.Errorf("lastHeartbeatTime %v, want the last heartbeat heard (%s)", n.LastHeartbeatTime, last)
	}
	if n.SessionReplica == "" || !n.HeartbeatLost {
		t.Errorf("node %+v: want heartbeatLost and the replica that held it", n)
	}
	// The session was closed with the heartbeat timeout.
	select {
	case _, open := <-acks:
		if open {
			for range acks {
			}
		}
	case <-time.After(10 * time.Second):
		t.Error("the silent session was not closed")
	}
}

// TestFinishedWorkersSilenceIsNotLost: a sidecar that reported its pod
// terminating flushes and ends its session with the pod. Its silence after
// that is no lost heartbeat: the binding stays Finishing until the
// controller's verdict, however long that takes (e2e scenario 4 saw it go
// back to Running/HeartbeatLost while the leader was away).
func TestFinishedWorkersSilenceIsNotLost(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: testHeartbeat.String()})
	c, stop, done := runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	finishAndStop(t, c, stop, done)
	j.waitPhase(t, tetherv1.PhaseFinishing, tetherv1.ReasonTerminating)
	// Past the silence that makes a running worker lost, the phase holds.
	deadline := time.Now().Add(missed*testHeartbeat + livenessPeriod + detectionSlack)
	for time.Now().Before(deadline) {
		wb := j.binding(t)
		if wb.Status.Phase != tetherv1.PhaseFinishing || lifecycle.IsHeartbeatLost(&wb.Status) {
			t.Fatalf("after the finished worker's session ended: %s/%s (%s), want Finishing/Terminating with no HeartbeatLost",
				wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
