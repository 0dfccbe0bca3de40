package binding

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// TestTwoReplicasServeOneBinding runs a second control plane (as the
// Deployment's second pod would) and has the worker talk to it while the
// first holds the lease; then the first one restarts and the lease moves. The
// binding's durable state carries over: no phase regression, no second
// attempt, and the trainer's exit is still mapped by whichever replica leads.
func TestTwoReplicasServeOneBinding(t *testing.T) {
	ctx := context.Background()
	replica, err := env.StartReplica(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()

	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	cfg := j.clientConfig()
	cfg.ServerURL = replica.BindingURL
	c, _, done := runningClient(t, cfg)
	before := j.waitPhase(t, tetherv1.PhaseRunning, "")

	// The first replica (the lease holder, running the controller) restarts.
	if err := env.RestartControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	seq := c.LastAckedSeq()
	eventually(t, 15*time.Second, func() error {
		if c.LastAckedSeq() <= seq+1 {
			return errors.New("the second replica stopped acknowledging heartbeats")
		}
		return nil
	})
	after := j.binding(t)
	if after.Status.Phase != tetherv1.PhaseRunning || after.Status.Attempt != before.Status.Attempt ||
		after.Status.Worker.RegisteredTime != before.Status.Worker.RegisteredTime {
		t.Fatalf("after the restart: %s attempt %d; before: attempt %d", after.Status.Phase, after.Status.Attempt, before.Status.Attempt)
	}

	finishTrainer(t, j, 3)
	setTrainJobCondition(t, j, "Failed", "jobset failed: BackoffLimitExceeded")
	j.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Error("the second replica kept the session of a finished binding open")
	}
}
