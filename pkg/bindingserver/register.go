package bindingserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// handleRegister registers a worker: the gate admits the request, the
// registration is recorded on the binding (which may start an attempt), and
// the answer carries what the sidecar resumes from.
func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if ref := s.gate.Limit(r); ref != nil {
		s.reject(w, r, ref, nil)
		return
	}
	var req binding.RegisterRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, binding.MaxRegisterBody))
	if err := dec.Decode(&req); err != nil {
		s.reject(w, r, workerauth.Refuse(http.StatusBadRequest, binding.ErrBadRequest, "bad_request", "invalid registration body (at most %d bytes of JSON): %v", binding.MaxRegisterBody, err), nil)
		return
	}
	worker, ref := s.gate.Admit(ctx, r, workerauth.Claim{Namespace: req.Pod.Namespace, JobID: req.JobID, WorkerID: req.WorkerID, Pod: req.Pod, Registering: true})
	if ref != nil {
		s.reject(w, r, ref, worker.Binding)
		return
	}
	wb, pod, rank := worker.Binding, worker.Pod, worker.Rank
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// A pod on its way out never becomes the node's pod again (its
		// replacement may already be).
		s.reject(w, r, workerauth.Refuse(http.StatusConflict, binding.ErrBadRequest, "pod_ended",
			"pod %s is terminating or has ended: it cannot register", pod.Name), wb)
		return
	}
	key := types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}
	seen := lifecycle.Pod{Rank: rank, Name: pod.Name, UID: string(pod.UID), NodeName: pod.Spec.NodeName, RestartAttempt: trainjob.RestartAttempt(pod)}
	var started, previous string
	updated, err := s.updateStatus(ctx, key, func(st *tetherv1.WorkerBindingStatus) bool {
		// The pod this one takes the node from, named in the Event.
		previous = lifecycle.InPlaceOf(lifecycle.Node(st, rank), seen.UID)
		var changed bool
		changed, started = lifecycle.PodSeen(st, seen, true, s.opts.Now())
		if started != tetherv1.AttemptPodReplaced {
			previous = ""
		}
		return changed
	})
	if err != nil {
		s.reject(w, r, workerauth.Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "recording the registration: %v", err), wb)
		return
	}
	s.metrics.registrations.Inc()
	if started != "" {
		s.metrics.attempts.WithLabelValues(started).Inc()
		if s.events != nil {
			note := fmt.Sprintf("attempt %d started: %s (node %d, pod %s registered%s)", updated.Status.Attempt, started, rank, pod.Name, previous)
			s.events.Eventf(trainjob.Ref(wb.Namespace, wb.Spec.TrainJobName, ""), nil, corev1.EventTypeNormal, tetherv1.ReasonAttemptStarted,
				lifecycle.EventAction, "%s", note)
		}
	}
	s.log.Info("worker registered", "binding", key.String(), "node", rank, "pod", pod.Name, "phase", updated.Status.Phase,
		"attempt", updated.Status.Attempt, "attemptStartedBy", updated.Status.AttemptStartedBy)

	var lastSeq uint64
	if n := lifecycle.Node(&updated.Status, rank); n != nil {
		lastSeq = uint64(n.LastSeq)
	}
	if st, ok := s.hub.get(workerKey{key, rank}); ok && st.lastSeq > lastSeq {
		lastSeq = st.lastSeq
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(binding.RegisterResponse{
		JobID: wb.Spec.JobID, WorkerID: wb.Spec.WorkerID, Phase: string(updated.Status.Phase),
		HeartbeatInterval: binding.Duration{Duration: heartbeatInterval(wb)}, LastSeq: lastSeq,
		NodeRank: rank, NodeCount: updated.Status.NodeCount, Attempt: updated.Status.Attempt,
	})
}

// heartbeatInterval is the interval recorded on the binding: the one the pod
// webhook gave the sidecar.
func heartbeatInterval(wb *tetherv1.WorkerBinding) time.Duration {
	return lifecycle.Settings(&wb.Spec).HeartbeatInterval.Duration
}

// reject answers a refused request and counts it; the log line names the
// binding when one was found, never the token.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, ref *workerauth.Refusal, wb *tetherv1.WorkerBinding) {
	s.metrics.refusals.WithLabelValues(ref.Reason).Inc()
	kv := []any{"path", r.URL.Path, "remote", r.RemoteAddr, "status", ref.Status, "reason", ref.Reason, "message", ref.Message}
	if wb != nil {
		kv = append(kv, "binding", wb.Namespace+"/"+wb.Name)
	}
	s.log.Info("refused binding request", kv...)
	ref.Write(w)
}
