package bindingserver

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// livenessPeriod is how often the server checks its workers.
const livenessPeriod = time.Second

// watchLiveness checks, every livenessPeriod, each worker this replica knows:
// a binding that was deleted or finished closes its session, and so does a
// session opened with a token the binding no longer accepts; a worker whose
// session ended and who has not come back within the missed-heartbeat budget
// is HeartbeatLost; a pending command is pushed.
//
// Silence on an open session is caught by its read deadline instead.
func (s *Server) watchLiveness(ctx context.Context) {
	t := time.NewTicker(livenessPeriod)
	defer t.Stop()
	// One round's buffers serve the next: at 10,000 workers a round that
	// allocated per worker (a state copy, a binding, a TrainJob) was most of
	// the server's garbage, and so of its GC's pauses and mark assists.
	var entries []*workerEntry
	wb := &tetherv1.WorkerBinding{}
	tj := &metav1.PartialObjectMetadata{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.opts.Now()
		clear(entries)
		entries = s.hub.entries(entries[:0])
		for _, e := range entries {
			st := e.snapshot()
			// Read-only: the cache's own copy, not a deep copy per worker
			// per second (10,000 sessions made that most of this loop's
			// cost), read into the round's one binding: nothing below keeps it.
			err := s.cache.Get(ctx, st.key.binding, wb, readOnly...)
			// err != nil first: IsNotFound allocates even for a nil error.
			if err != nil && apierrors.IsNotFound(err) && !s.goneLive(ctx, st.key.binding) {
				continue // this replica's cache has not seen it (yet, or again)
			}
			switch {
			case err != nil && apierrors.IsNotFound(err) || (err == nil && wb.DeletionTimestamp != nil):
				if st.session != nil {
					st.session.close(binding.CloseRevoked, "binding deleted")
				}
				s.hub.forget(st.key)
				continue
			case err != nil:
				continue
			case s.revokedWithTrainJob(ctx, st, wb, tj):
				continue
			case lifecycle.IsFinal(wb.Status.Phase):
				if st.session != nil {
					st.session.close(binding.CloseFinished, "binding "+string(wb.Status.Phase))
				}
				s.hub.forget(st.key)
				continue
			}
			node := lifecycle.Node(&wb.Status, st.key.rank)
			if st.connected {
				if node != nil && node.PodUID != "" && node.PodUID != st.session.podUID && node.RegisteredTime != nil {
					// The node has a newer pod (replaced, or a new attempt): this
					// session speaks for one that is gone.
					st.session.close(binding.CloseReplaced, "the node's pod was replaced by "+node.PodName)
					continue
				}
				if !workerauth.TokenAccepted(wb, st.session.tokenHash, now) {
					st.session.close(binding.CloseTokenExpired, "token reissued and the previous one's overlap is over: reconnect with the current token")
					s.metrics.refusals.WithLabelValues("token_expired").Inc()
					continue
				}
				if node != nil && node.HeartbeatLost && node.PodUID == st.session.podUID && !st.lost && !st.lastHeartbeat.IsZero() &&
					now.Sub(st.lastHeartbeat) < time.Duration(s.opts.MissedHeartbeats)*st.interval {
					// Recorded lost by the controller (this replica's Lease
					// looked expired, e.g. renewals stalled) while the worker
					// heartbeats here: the next write clears it.
					s.writes.Add(st.key.binding)
				}
				s.pushPendingCommand(ctx, st.key, wb)
				continue
			}
			if node != nil && node.LastHeartbeatTime != nil && node.LastHeartbeatTime.After(st.lastHeartbeat) {
				// Another replica heard from the worker after this one did.
				s.hub.forget(st.key)
				continue
			}
			budget := time.Duration(s.opts.MissedHeartbeats) * st.interval
			if !st.lost && !st.lastHeartbeat.IsZero() && now.Sub(st.lastHeartbeat) > budget {
				s.markLost(ctx, st.key, "no heartbeat for "+now.Sub(st.lastHeartbeat).Round(time.Second).String()+" since the session ended")
			}
			if st.lost && now.Sub(st.lastHeartbeat) > 10*budget {
				// Another replica may have the worker now; stop tracking it here.
				s.hub.forget(st.key)
			}
		}
	}
}

// readOnly reads the cache's own object, not a deep copy: for readers that
// change nothing and keep nothing (one slice for all, not one per call).
var readOnly = []client.GetOption{client.UnsafeDisableDeepCopy}

// goneLive confirms with the API server that a binding this replica's cache
// does not hold is gone. A cache lags: after an API server or etcd restart,
// or a replica's own, its watch can miss a binding for seconds while a
// session opened through the gate's live lookup is already here; a session
// closed as revoked is never reopened (the sidecar idles until its pod
// ends), so a miss alone is no proof. Only a live NotFound is; a read that
// fails, or no live reader, proves nothing either way this round.
func (s *Server) goneLive(ctx context.Context, key types.NamespacedName) bool {
	if s.live == nil {
		return true // tests without an API server: the cache is the truth
	}
	err := s.live.Get(ctx, key, &tetherv1.WorkerBinding{})
	return err != nil && apierrors.IsNotFound(err)
}

// revokedWithTrainJob closes the worker's session with CloseRevoked and
// forgets the worker when its binding's TrainJob is gone or terminating
// (the liveness check, every second on every replica).
func (s *Server) revokedWithTrainJob(ctx context.Context, st stateSnapshot, wb *tetherv1.WorkerBinding, tj *metav1.PartialObjectMetadata) bool {
	reason, msg, err := s.gate.TrainJobGone(ctx, wb, tj)
	if err != nil || reason == "" {
		return false
	}
	if st.session != nil {
		st.session.close(binding.CloseRevoked, msg)
		s.metrics.refusals.WithLabelValues(reason).Inc()
	}
	s.hub.forget(st.key)
	return true
}
