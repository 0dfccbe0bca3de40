package lifecycle

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// A binding's phase is the job's, derived from what is recorded of its
// nodes (derive) except where an outside verdict holds it: Pending while
// Kueue suspends or has preempted the job, Finishing/AwaitingArtifacts once
// the TrainJob is Complete, and the final phases. Every writer (controller,
// any binding-server replica) applies its change to a fresh read and derives
// again, so concurrent writers never regress each other.

// IsFinal reports whether phase is Succeeded or Failed.
func IsFinal(p tetherv1.WorkerBindingPhase) bool {
	return p == tetherv1.PhaseSucceeded || p == tetherv1.PhaseFailed
}

// Initial gives a binding without a phase its first status: Pending, its
// token issued, waiting for the sidecar. It reports whether anything changed.
func Initial(st *tetherv1.WorkerBindingStatus) bool {
	if st.Phase != "" {
		return false
	}
	st.Phase, st.Reason, st.Message = tetherv1.PhasePending, tetherv1.ReasonTokenIssued, "waiting for the sidecar to register"
	return true
}

// held reports whether the phase is decided by an outside verdict, not by
// the nodes' state.
func held(st *tetherv1.WorkerBindingStatus) bool {
	switch {
	case IsFinal(st.Phase):
		return true
	case st.Phase == tetherv1.PhasePending && (st.Reason == tetherv1.ReasonSuspended || st.Reason == tetherv1.ReasonPreempted):
		return true
	case st.Phase == tetherv1.PhaseFinishing && (st.Reason == tetherv1.ReasonAwaitingArtifacts || st.Reason == tetherv1.ReasonPromotingArtifacts):
		return true
	case Cancelling(st):
		return true
	}
	return false
}

// derive sets a non-held phase from the nodes of the current attempt:
// Registered once a sidecar registered, Running once one heartbeats
// (reason HeartbeatLost while any node is silent), Finishing once every
// node with a pod reported its pod terminating. It reports whether anything
// changed.
func derive(st *tetherv1.WorkerBindingStatus) bool {
	if held(st) {
		return false
	}
	var registered, heartbeating, terminating, withPod, lost int
	var first *tetherv1.NodeStatus
	for i := range st.Nodes {
		n := &st.Nodes[i]
		if n.PodUID == "" {
			continue
		}
		withPod++
		if n.RegisteredTime != nil {
			registered++
			if first == nil {
				first = n
			}
		}
		if n.LastHeartbeatTime != nil {
			heartbeating++
		}
		if n.Terminating {
			terminating++
		}
		if n.HeartbeatLost {
			lost++
		}
	}
	multi := st.NodeCount > 1
	switch {
	case registered == 0:
		return false
	case terminating > 0 && terminating == withPod:
		msg := "the worker's pod is terminating"
		if multi {
			msg = fmt.Sprintf("every node's pod is terminating (%d of %d)", terminating, st.NodeCount)
		}
		return set(st, tetherv1.PhaseFinishing, tetherv1.ReasonTerminating, msg)
	case lost > 0:
		msg := "no heartbeat"
		if c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionHeartbeatLost); c != nil {
			msg = c.Message
		}
		return set(st, tetherv1.PhaseRunning, tetherv1.ReasonHeartbeatLost, msg)
	case heartbeating > 0:
		msg := "worker is heartbeating"
		if multi {
			msg = fmt.Sprintf("%d of %d nodes heartbeating", heartbeating, st.NodeCount)
		}
		return set(st, tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating, msg)
	default:
		msg := "sidecar in pod " + first.PodName + " registered"
		if multi {
			msg = fmt.Sprintf("%d of %d nodes' sidecars registered", registered, st.NodeCount)
		}
		return set(st, tetherv1.PhaseRegistered, tetherv1.ReasonRegistered, msg)
	}
}

// finish makes the binding final unless it already is.
func finish(st *tetherv1.WorkerBindingStatus, phase tetherv1.WorkerBindingPhase, reason, msg string) bool {
	if IsFinal(st.Phase) {
		return false
	}
	return set(st, phase, reason, msg)
}

// Suspended: the TrainJob is suspended (Kueue holds it, or evicted it). A
// live attempt ends as Preempted; a binding that never ran stays Pending. A
// cancelled job's suspension is its stop: Cancelling goes on (cancel.go).
func Suspended(st *tetherv1.WorkerBindingStatus, msg string) bool {
	if IsFinal(st.Phase) || Cancelling(st) {
		return false
	}
	switch {
	case st.Phase == tetherv1.PhasePending && st.Reason == tetherv1.ReasonPreempted:
		return false
	case st.Attempt == 0:
		return set(st, tetherv1.PhasePending, tetherv1.ReasonSuspended, msg)
	}
	// The attempt is over: the next pod starts a new one.
	resetNodes(st)
	meta.RemoveStatusCondition(&st.Conditions, tetherv1.ConditionHeartbeatLost)
	return set(st, tetherv1.PhasePending, tetherv1.ReasonPreempted, msg)
}

// Resumed: the TrainJob is no longer suspended (Kueue admitted it). A
// binding that waited in the queue says so; a preempted one keeps its reason
// (the next pod starts the next attempt) with a current message.
func Resumed(st *tetherv1.WorkerBindingStatus) bool {
	if st.Phase != tetherv1.PhasePending {
		return false
	}
	switch st.Reason {
	case tetherv1.ReasonSuspended:
		return set(st, tetherv1.PhasePending, tetherv1.ReasonAdmitted, "TrainJob admitted; waiting for the sidecar to register")
	case tetherv1.ReasonPreempted:
		return set(st, tetherv1.PhasePending, tetherv1.ReasonPreempted,
			fmt.Sprintf("attempt %d was preempted; TrainJob admitted again, waiting for the sidecar to register", st.Attempt))
	}
	return false
}

// PodCreateFailed: the job is admitted but its trainer Jobs cannot create
// their pods (msg has the Job's FailedCreate Event); only a binding that
// waits for its first pod says so, and the next pod clears it.
func PodCreateFailed(st *tetherv1.WorkerBindingStatus, msg string) bool {
	if st.Phase != tetherv1.PhasePending || held(st) || st.Reason == tetherv1.ReasonAttemptStarted {
		return false
	}
	return set(st, tetherv1.PhasePending, tetherv1.ReasonPodCreateFailed, msg)
}

// Cancelled: the orchestrator cancelled the job and no trainer pod remains
// (observeCancel).
func Cancelled(st *tetherv1.WorkerBindingStatus, msg string) bool {
	return finish(st, tetherv1.PhaseFailed, tetherv1.ReasonCancelled, msg)
}

func set(st *tetherv1.WorkerBindingStatus, phase tetherv1.WorkerBindingPhase, reason, msg string) bool {
	if st.Phase == phase && st.Reason == reason && st.Message == msg {
		return false
	}
	st.Phase, st.Reason, st.Message = phase, reason, msg
	return true
}

// FormatFloat renders a progress number for the API (no floats in CRDs).
func FormatFloat(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'g', 6, 64)
}

// Describe is a one-line summary for logs and Events.
func Describe(st *tetherv1.WorkerBindingStatus) string {
	return fmt.Sprintf("%s (%s)", st.Phase, st.Reason)
}
