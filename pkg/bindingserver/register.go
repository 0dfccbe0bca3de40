package server

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
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !s.limitRequest(w, r) {
		return
	}
	var req binding.RegisterRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, binding.MaxRegisterBody))
	if err := dec.Decode(&req); err != nil {
		s.reject(w, r, refuse(http.StatusBadRequest, binding.ErrBadRequest, "bad_request", "invalid registration body (at most %d bytes of JSON): %v", binding.MaxRegisterBody, err), nil)
		return
	}
	wb, ref := s.authenticate(ctx, r, req.Pod.Namespace)
	if ref != nil {
		s.reject(w, r, ref, nil)
		return
	}
	pod, ref := s.checkIdentity(ctx, r, wb, req.JobID, req.WorkerID, req.Pod)
	if ref != nil {
		s.reject(w, r, ref, wb)
		return
	}
	rank, ref := boundRank(wb, pod)
	if ref != nil {
		s.reject(w, r, ref, wb)
		return
	}
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		// A pod on its way out never becomes the node's pod again (its
		// replacement may already be).
		s.reject(w, r, refuse(http.StatusConflict, binding.ErrBadRequest, "pod_ended",
			"pod %s is terminating or has ended: it cannot register", pod.Name), wb)
		return
	}
	key := types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}
	seen := lifecycle.Pod{Rank: rank, Name: pod.Name, UID: string(pod.UID), NodeName: pod.Spec.NodeName, RestartAttempt: trainjob.RestartAttempt(pod)}
	var started string
	updated, err := s.updateStatus(ctx, key, func(st *tetherv1.WorkerBindingStatus) bool {
		var changed bool
		changed, started = lifecycle.PodSeen(st, seen, true, s.opts.Now())
		return changed
	})
	if err != nil {
		s.reject(w, r, refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "recording the registration: %v", err), wb)
		return
	}
	s.metrics.registrations.Inc()
	if started != "" {
		s.metrics.attempts.WithLabelValues(started).Inc()
		if s.events != nil {
			note := fmt.Sprintf("attempt %d started: %s (node %d, pod %s registered)", updated.Status.Attempt, started, rank, pod.Name)
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

// boundRank is the pod's node rank, refused when the binding does not bind
// that node (settings nodes=primary, or a rank beyond MaxBoundNodes or the
// job's node count).
func boundRank(wb *tetherv1.WorkerBinding, pod *corev1.Pod) (int32, *refusal) {
	r, err := trainjob.Rank(pod)
	if err != nil {
		return 0, refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch", "%v", err)
	}
	switch {
	case r >= binding.MaxBoundNodes:
		return 0, refuse(http.StatusForbidden, binding.ErrForbidden, "node_not_bound",
			"pod %s is node %d; a binding binds at most %d nodes", pod.Name, r, binding.MaxBoundNodes)
	case r > 0 && lifecycle.Settings(&wb.Spec).Nodes == jobconfig.NodesPrimary:
		return 0, refuse(http.StatusForbidden, binding.ErrForbidden, "node_not_bound",
			"pod %s is node %d and the binding binds node 0 only (%s=%s)", pod.Name, r, jobconfig.NodesAnnotation, jobconfig.NodesPrimary)
	case wb.Status.NodeCount > 0 && int32(r) >= wb.Status.NodeCount:
		return 0, refuse(http.StatusForbidden, binding.ErrForbidden, "node_not_bound",
			"pod %s is node %d of a job of %d nodes", pod.Name, r, wb.Status.NodeCount)
	}
	return int32(r), nil
}

// heartbeatInterval is the interval recorded on the binding: the one the pod
// webhook gave the sidecar.
func heartbeatInterval(wb *tetherv1.WorkerBinding) time.Duration {
	return lifecycle.Settings(&wb.Spec).HeartbeatInterval.Duration
}

// reject answers a refused request and counts it; the log line names the
// binding when one was found, never the token.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, ref *refusal, wb *tetherv1.WorkerBinding) {
	s.metrics.refusals.WithLabelValues(ref.reason).Inc()
	kv := []any{"path", r.URL.Path, "remote", r.RemoteAddr, "status", ref.status, "reason", ref.reason, "message", ref.message}
	if wb != nil {
		kv = append(kv, "binding", wb.Namespace+"/"+wb.Name)
	}
	s.log.Info("refused binding request", kv...)
	writeError(w, ref)
}
