package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func TestInitialOnlyOnce(t *testing.T) {
	var st tetherv1.WorkerBindingStatus
	if !Initial(&st) || st.Phase != tetherv1.PhasePending || st.Reason != tetherv1.ReasonTokenIssued {
		t.Fatalf("Initial on an empty status: %+v", st)
	}
	st.Phase = tetherv1.PhaseRunning
	if Initial(&st) || st.Phase != tetherv1.PhaseRunning {
		t.Fatalf("Initial changed a status that had a phase: %+v", st)
	}
}

func TestTransitionEventType(t *testing.T) {
	for _, c := range []struct {
		phase  tetherv1.WorkerBindingPhase
		reason string
		want   string
	}{
		{tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating, corev1.EventTypeNormal},
		{tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded, corev1.EventTypeNormal},
		{tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed, corev1.EventTypeWarning},
		{tetherv1.PhaseFailed, tetherv1.ReasonRequiredOutputsMissing, corev1.EventTypeWarning},
		{tetherv1.PhaseRunning, tetherv1.ReasonHeartbeatLost, corev1.EventTypeWarning},
	} {
		st := &tetherv1.WorkerBindingStatus{Phase: c.phase, Reason: c.reason, Message: "m"}
		typ, reason, note := TransitionEvent(st)
		if typ != c.want || reason != c.reason || note != "binding "+string(c.phase)+": m" {
			t.Errorf("%s/%s: %s %s %q", c.phase, c.reason, typ, reason, note)
		}
	}
	if Transitioned(tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating, &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning, Reason: tetherv1.ReasonHeartbeating}) {
		t.Error("same phase and reason counted as a transition")
	}
}
