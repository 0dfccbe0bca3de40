package bindingserver

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// maxStatusRetries bounds the retries of one heartbeat-status write (with
// the queue's backoff, 5ms doubling: about 5s in all).
const maxStatusRetries = 10

// statusWriters is how many goroutines write heartbeat status; it bounds the
// binding server's concurrent writes to the API server.
const statusWriters = 4

// runStatusWriters writes queued bindings' heartbeat status until ctx ends.
// The queue coalesces: a binding queued again before its write starts is
// written once, with the latest state.
func (s *Server) runStatusWriters(ctx context.Context) {
	for range statusWriters {
		go func() {
			for {
				key, shutdown := s.writes.Get()
				if shutdown {
					return
				}
				switch err := s.writeHeartbeatStatus(ctx, key); {
				case err == nil || ctx.Err() != nil:
					s.writes.Forget(key)
				case s.writes.NumRequeues(key) >= maxStatusRetries:
					s.clearPhaseWrites(key)
					// Bounded: the worker's next heartbeat queues a fresh write.
					s.log.Error(err, "writing heartbeat status failed; giving up until the next heartbeat",
						"binding", key.String(), "attempts", s.writes.NumRequeues(key)+1)
					s.writes.Forget(key)
				default:
					s.log.Error(err, "writing heartbeat status; will retry", "binding", key.String())
					s.writes.AddRateLimited(key)
				}
				s.writes.Done(key)
			}
		}()
	}
	<-ctx.Done()
	s.writes.ShutDown()
}

// writeHeartbeatStatus writes what the hub knows of the binding's workers'
// heartbeats (every node this replica holds, in one write), and ends their
// sessions if the binding turned out final or deleted.
func (s *Server) writeHeartbeatStatus(ctx context.Context, key types.NamespacedName) error {
	type beat struct {
		rank int32
		workerState
	}
	var beats []beat
	for _, k := range s.hub.workersOf(key) {
		if st, ok := s.hub.get(k); ok && !st.lastHeartbeat.IsZero() {
			beats = append(beats, beat{k.rank, st})
		}
	}
	if len(beats) == 0 {
		return nil
	}
	// The binding names this replica's Lease only while it vouches for the
	// sessions; without one, the heartbeat time alone carries liveness.
	replica := ""
	if s.lease.Vouching(s.opts.Now()) {
		replica = s.lease.Name()
	}
	wb, err := s.updateStatus(ctx, key, func(status *tetherv1.WorkerBindingStatus) bool {
		changed := false
		for _, b := range beats {
			if lifecycle.Heartbeat(status, b.rank, b.podUID, b.lastHeartbeat, int64(b.lastSeq), apiProgress(&b.workerState)) {
				changed = true
			}
			if lifecycle.CheckpointReported(status, b.rank, b.podUID, apiCheckpoint(b.checkpoint)) {
				changed = true
			}
			if lifecycle.SessionHeld(status, b.rank, b.podUID, replica) {
				changed = true
			}
			if lifecycle.UploadReported(status, b.rank, b.podUID, b.uploadedBytes, b.artifactError) {
				changed = true
			}
			if s.skipped.apply(workerKey{key, b.rank}, status) {
				changed = true
			}
		}
		return changed
	})
	switch {
	case apierrors.IsNotFound(err):
		s.closeSessions(key, binding.CloseRevoked, "binding deleted")
		return nil
	case err != nil:
		return err
	case wb.DeletionTimestamp != nil:
		s.closeSessions(key, binding.CloseRevoked, "binding deleted")
	case lifecycle.IsFinal(wb.Status.Phase):
		s.closeSessions(key, binding.CloseFinished, "binding "+string(wb.Status.Phase))
	}
	for _, b := range beats {
		s.hub.update(workerKey{key, b.rank}, func(st *workerState) { st.phase, st.phaseWriteQueued = string(wb.Status.Phase), false })
	}
	return nil
}

// clearPhaseWrites lets the binding's next heartbeats queue their phase
// write again (the last one was given up).
func (s *Server) clearPhaseWrites(b types.NamespacedName) {
	for _, k := range s.hub.workersOf(b) {
		s.hub.update(k, func(st *workerState) { st.phaseWriteQueued = false })
	}
}

// closeSessions closes the sessions of every worker of the binding.
func (s *Server) closeSessions(key types.NamespacedName, code int, reason string) {
	for _, k := range s.hub.workersOf(key) {
		s.closeSession(k, code, reason)
	}
}

func (s *Server) closeSession(key workerKey, code int, reason string) {
	var sess *session
	s.hub.update(key, func(st *workerState) { sess = st.session })
	if sess != nil {
		sess.close(code, reason)
	}
}
