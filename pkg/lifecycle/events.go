package lifecycle

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// EventAction is the action of every Event about a binding.
const EventAction = "Bind"

// Event reasons that are not a phase's reason (those are tetherv1.Reason*):
// what the controller announces about the binding's objects.
const (
	ReasonBound         = "Bound"
	ReasonNotStamped    = "NotStamped"
	ReasonTokenReissued = "TokenReissued"
)

// Transitioned reports whether st moved from phase and reason: such a write
// is announced by an Event (TransitionEvent), whoever made it.
func Transitioned(phase tetherv1.WorkerBindingPhase, reason string, st *tetherv1.WorkerBindingStatus) bool {
	return phase != st.Phase || reason != st.Reason
}

// TransitionEvent is the Event announcing st's phase: a Warning when the
// binding failed or lost its heartbeat, Normal otherwise.
func TransitionEvent(st *tetherv1.WorkerBindingStatus) (eventType, reason, note string) {
	eventType = corev1.EventTypeNormal
	if st.Phase == tetherv1.PhaseFailed || st.Reason == tetherv1.ReasonHeartbeatLost || st.Reason == tetherv1.ReasonPodCreateFailed {
		eventType = corev1.EventTypeWarning
	}
	return eventType, st.Reason, fmt.Sprintf("binding %s: %s", st.Phase, st.Message)
}
