package bindingserver

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// maxConflictRetries bounds the re-reads after write conflicts; pauses
// between them grow from 10ms to 500ms (about 5s in all).
const maxConflictRetries = 15

func conflictPause(attempt int) time.Duration {
	return min(10*time.Millisecond<<attempt, 500*time.Millisecond)
}

// updateStatus applies change to the binding's status and writes it when
// change reports a change. A conflict (another replica or the controller
// wrote first) re-reads from the API server and re-applies: the lifecycle
// rules decide again on the fresh status, so no write regresses another.
func (s *Server) updateStatus(ctx context.Context, key types.NamespacedName, change func(*tetherv1.WorkerBindingStatus) bool) (*tetherv1.WorkerBinding, error) {
	return s.updateStatusFrom(ctx, s.cache, key, change)
}

// updateStatusFrom is updateStatus starting from a read of r: the API server
// when the decision depends on a write this server just made, which the
// cache may not show yet.
func (s *Server) updateStatusFrom(ctx context.Context, r client.Reader, key types.NamespacedName, change func(*tetherv1.WorkerBindingStatus) bool) (*tetherv1.WorkerBinding, error) {
	wb := &tetherv1.WorkerBinding{}
	err := r.Get(ctx, key, wb)
	if err != nil && apierrors.IsNotFound(err) && s.live != nil && r != s.live {
		// Not in this replica's cache is not gone (it lags); callers take
		// NotFound for a deleted binding and revoke its sessions.
		err = s.live.Get(ctx, key, wb)
	}
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		phase, reason := wb.Status.Phase, wb.Status.Reason
		// A sidecar can register before the controller wrote the binding's
		// first status (it writes the token Secret just before): the token
		// it authenticated with is issued, so this write says so first, and
		// announces it, or the job's TokenIssued Event would never be sent.
		initialized := lifecycle.Initial(&wb.Status)
		initial := wb.Status // that first status, when this write makes it
		changed := change(&wb.Status)
		// The outcome conditions follow the phase on every write (and a
		// binding written before they existed gets them on its next one).
		if !lifecycle.SetOutcomeConditions(&wb.Status, wb.Generation) && !changed && !initialized {
			return wb, nil
		}
		err := s.writer.Status().Update(ctx, wb)
		if err == nil && initialized {
			s.recordTransition(wb, &initial)
			phase, reason = initial.Phase, initial.Reason
		}
		if err == nil && lifecycle.Transitioned(phase, reason, &wb.Status) {
			s.recordTransition(wb, &wb.Status)
		}
		if err == nil || !apierrors.IsConflict(err) || attempt == maxConflictRetries || s.live == nil {
			return wb, err
		}
		// Every node's sidecar, every replica and the controller write this
		// one object: at a job's end (all nodes flush at once) conflicts come
		// in runs. A jittered pause lets the writers fall out of step.
		select {
		case <-ctx.Done():
			return wb, ctx.Err()
		case <-time.After(wait.Jitter(conflictPause(attempt), 1)):
		}
		wb = &tetherv1.WorkerBinding{}
		if err := s.live.Get(ctx, key, wb); err != nil {
			return nil, err
		}
	}
}

// recordTransition records the change of wb's phase or reason to st's as
// an Event on the TrainJob.
func (s *Server) recordTransition(wb *tetherv1.WorkerBinding, st *tetherv1.WorkerBindingStatus) {
	if s.events == nil {
		return
	}
	eventType, reason, note := lifecycle.TransitionEvent(st)
	s.events.Eventf(trainjob.Ref(wb.Namespace, wb.Spec.TrainJobName, ""), nil, eventType, reason, lifecycle.EventAction, "%s", note)
}
