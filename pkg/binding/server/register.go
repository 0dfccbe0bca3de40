package server

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
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
	pod, ref := s.checkIdentity(ctx, wb, req.JobID, req.WorkerID, req.Pod)
	if ref != nil {
		s.reject(w, r, ref, wb)
		return
	}
	key := types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}
	worker := tetherv1.WorkerStatus{PodName: pod.Name, PodUID: string(pod.UID), NodeName: pod.Spec.NodeName}
	updated, err := s.updateStatus(ctx, key, func(st *tetherv1.WorkerBindingStatus) bool {
		return lifecycle.Registered(st, worker, s.opts.Now())
	})
	if err != nil {
		s.reject(w, r, refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "recording the registration: %v", err), wb)
		return
	}
	s.metrics.registrations.Inc()
	s.log.Info("worker registered", "binding", key.String(), "pod", pod.Name, "phase", updated.Status.Phase, "attempt", updated.Status.Attempt)

	lastSeq := uint64(updated.Status.LastSeq)
	if st := s.hub.state(key); st != nil && st.lastSeq > lastSeq {
		lastSeq = st.lastSeq
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(binding.RegisterResponse{
		JobID: wb.Spec.JobID, WorkerID: wb.Spec.WorkerID, Phase: string(updated.Status.Phase),
		HeartbeatInterval: binding.Duration{Duration: heartbeatInterval(wb)}, LastSeq: lastSeq,
	})
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
