package bindingserver

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// heartbeat records a heartbeat in memory and has the status written when a
// transition happens or the status interval has passed; it writes nothing
// itself (the status writers do), so it takes no context. It returns the
// phase for the ack, or a close code when the binding cannot take
// heartbeats.
func (s *Server) heartbeat(sess *session, hb *binding.Heartbeat) (string, int) {
	key := sess.key
	now := s.opts.Now()
	var urgent, opened, changed, wasLost bool
	var phase string
	s.hub.update(key, func(st *workerState) {
		st.lastHeartbeat = now
		if hb.Seq > st.lastSeq {
			st.lastSeq = hb.Seq
		}
		if progressChanged(st.progress, hb.Progress) {
			changed = true
		}
		if hb.Progress != nil {
			st.progress = hb.Progress
		}
		st.steps.observe(hb.Progress, now)
		if !sameCheckpoint(st.checkpoint, hb.Checkpoint) {
			st.checkpoint, changed = hb.Checkpoint, true
		}
		changed = changed || hb.UploadedBytes != st.uploadedBytes
		st.uploadedBytes = hb.UploadedBytes
		// A new upload failure is worth a write of its own.
		newError := hb.ArtifactError != st.artifactError
		st.artifactError = hb.ArtifactError
		wasLost = st.lost
		st.lost = false
		phase = st.phase
		// A phase to leave is written once per write: heartbeats that come
		// while that write is queued or under way (a slow API server) do
		// not queue it again.
		phaseToLeave := phase == "" || phase == string(tetherv1.PhasePending) || phase == string(tetherv1.PhaseRegistered)
		if phaseToLeave && st.phaseWriteQueued {
			phaseToLeave = false
		} else if phaseToLeave {
			st.phaseWriteQueued = true
		}
		urgent = wasLost || newError || phaseToLeave
		opened = st.lastWrite.IsZero()
		st.lastWrite = now
	})
	s.metrics.heartbeats.Inc()
	// Skipped entries that changed are a transition.
	urgent = s.skipped.note(key, hb.Skipped, hb.SkippedCount) || urgent
	// Heartbeat status is paced per binding, not per node: one write
	// carries every node this replica holds, so a job of many nodes costs
	// no more writes than a job of one (pacing.go).
	switch s.hub.noteHeartbeat(key.binding, now, urgent, opened, changed, s.paceRules(now)) {
	case writeNow:
		// Written by the status writers, never on the session's reader:
		// a slow API server must not delay acks or starve pongs. It uses
		// the paced writes' budget if there is some (pacing.go).
		s.writeBudget.Allow()
		s.writes.Add(key.binding)
	case writePaced:
		s.paced.push(key.binding)
	case writeNone:
	}
	if wasLost {
		s.log.Info("heartbeats resumed", "binding", key.binding.String(), "node", key.rank)
	}
	return phase, 0
}

// markLost records HeartbeatLost once per silence, with the last heartbeat
// this replica heard (its memory is newer than the binding between writes),
// unless another replica took the session since.
func (s *Server) markLost(ctx context.Context, key workerKey, msg string) {
	first := false
	var last workerState
	s.hub.update(key, func(st *workerState) {
		first = !st.lost
		st.lost = true
		last = *st
	})
	if !first {
		return
	}
	elsewhere, marked := false, false
	if _, err := s.updateStatus(ctx, key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
		if elsewhere = lifecycle.HeldElsewhere(st, key.rank, s.lease.Name()); elsewhere {
			return false
		}
		if n := lifecycle.Node(st, key.rank); n != nil && !last.lastHeartbeat.IsZero() &&
			(n.LastHeartbeatTime == nil || last.lastHeartbeat.After(n.LastHeartbeatTime.Time)) {
			lifecycle.Heartbeat(st, key.rank, last.podUID, last.lastHeartbeat, int64(last.lastSeq), apiProgress(&last))
		}
		marked = lifecycle.HeartbeatLost(st, key.rank, msg)
		return marked
	}); err != nil {
		s.log.Error(err, "recording HeartbeatLost", "binding", key.binding.String(), "node", key.rank)
		return
	}
	if elsewhere {
		s.log.V(1).Info("silent here, but another replica holds the session now", "binding", key.binding.String(), "node", key.rank)
		return
	}
	if !marked {
		// The node's pod is terminating (its session ended with it), or
		// the binding is final or held: no heartbeat was lost.
		s.log.V(1).Info("silent here, but not lost", "binding", key.binding.String(), "node", key.rank)
		return
	}
	s.metrics.heartbeatsLost.Inc()
	s.log.Info("heartbeat lost", "binding", key.binding.String(), "node", key.rank, "why", msg)
}

// apiProgress is a worker's last progress as the binding shows it, with
// its median step interval.
func apiProgress(st *workerState) *tetherv1.Progress {
	p := st.progress
	if p == nil {
		return nil
	}
	out := &tetherv1.Progress{Step: p.Step, Epoch: lifecycle.FormatFloat(p.Epoch), Loss: lifecycle.FormatFloat(p.Loss),
		Fraction: lifecycle.FormatFloat(p.Fraction)}
	if !p.UpdatedAt.IsZero() {
		t := metav1.NewTime(p.UpdatedAt)
		out.UpdatedTime = &t
	}
	if d := st.steps.median(); d > 0 {
		out.StepInterval = &metav1.Duration{Duration: d}
	}
	return out
}

// apiCheckpoint is a worker's reported checkpoint as the binding shows it.
func apiCheckpoint(c *binding.Checkpoint) *tetherv1.CheckpointStatus {
	if c == nil {
		return nil
	}
	return &tetherv1.CheckpointStatus{Path: c.Path, Step: c.Step, Time: metav1.NewTime(c.VerifiedAt.Truncate(time.Second)), Files: int32(min(c.Files, 1<<31-1)), Bytes: c.Bytes}
}

func sameCheckpoint(a, b *binding.Checkpoint) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Path == b.Path && a.Step == b.Step && a.VerifiedAt.Equal(b.VerifiedAt) && a.Files == b.Files && a.Bytes == b.Bytes)
}
