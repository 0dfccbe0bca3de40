package lifecycle

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// The outcome conditions (Ready, Succeeded, Failed, Progressing and
// kstatus's Reconciling and Stalled) restate the phase in the form
// `kubectl wait --for=condition=...` and generic health checks read. They
// are a pure function of the status, so every writer (the controller, any
// binding-server replica, the orphan and settlement controllers) derives
// the same set from the same status and none undoes another's.
//
// The rule, for every phase and reason (a reason added later needs no
// change here): all six are present once the binding has a phase; each
// carries the phase's reason and message whatever its status, so a False
// condition says why, and the status alone says which way:
//
//	Ready        True in Running with reason Heartbeating, and in Succeeded
//	Succeeded    True in Succeeded
//	Failed       True in Failed
//	Progressing  True while not final, except reasons notProgressing names
//	             and a stalled trainer (ConditionSignals)
//	Reconciling  True while not final
//	Stalled      True in Failed
//
// Succeeded=False therefore does not mean failed: a live binding has it too.
//
// Ready stays True once Succeeded because kstatus (sigs.k8s.io/cli-utils,
// behind Flux's and kpt's health checks), when neither Reconciling nor
// Stalled is True, reads a Ready condition that is False as InProgress: a
// succeeded binding saying Ready=False would never read as done.

// MaxConditionMessageBytes bounds each outcome condition's message: six
// copies of the phase's message go into the one status object.
const MaxConditionMessageBytes = 1024

// notProgressing are the reasons of a live binding that waits on something
// outside it: Kueue holds the job, its pods cannot be created, its worker
// is silent. Preempted is not among them: it stays the reason after Kueue
// admits the job again (until the next attempt starts), so it cannot tell
// a held job from one on its way back.
var notProgressing = map[string]bool{
	tetherv1.ReasonSuspended:       true,
	tetherv1.ReasonPodCreateFailed: true,
	tetherv1.ReasonHeartbeatLost:   true,
}

// ConditionSignals are the facts besides the phase that the outcome
// conditions read.
//
// TrainerStalled is the hook for stall detection: when set (the message,
// e.g. "step 1200 has not advanced for 30m"), a live binding's Progressing
// turns False with reason TrainerStalled; a final binding is unaffected.
// It must be read from the status (signalsOf), never from a writer's own
// clock or memory: every writer derives the conditions again on each
// write, and a signal only one of them knew would flip back at the next
// write of another.
type ConditionSignals struct {
	TrainerStalled string
}

// signalsOf reads the ConditionSignals from the status. A stall is
// declared and cleared by the controller alone (checkStall, on its clock,
// so its Warning is sent once); every writer keeps what the status says of
// it, so no other write undoes it.
func signalsOf(st *tetherv1.WorkerBindingStatus) ConditionSignals {
	if c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionProgressing); Stalled(st) {
		return ConditionSignals{TrainerStalled: c.Message}
	}
	return ConditionSignals{}
}

// OutcomeConditions derives the outcome conditions of st (none before it
// has a phase), each with ObservedGeneration generation and no
// LastTransitionTime (SetOutcomeConditions keeps or sets it). Pure.
func OutcomeConditions(st *tetherv1.WorkerBindingStatus, sig ConditionSignals, generation int64) []metav1.Condition {
	if st.Phase == "" {
		return nil
	}
	reason := st.Reason
	if reason == "" {
		reason = string(st.Phase)
	}
	message := Truncate(st.Message, MaxConditionMessageBytes)
	cond := func(typ string, holds bool) metav1.Condition {
		status := metav1.ConditionFalse
		if holds {
			status = metav1.ConditionTrue
		}
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
	}
	final := IsFinal(st.Phase)
	progressing := cond(tetherv1.ConditionProgressing, !final && !notProgressing[st.Reason])
	if progressing.Status == metav1.ConditionTrue && sig.TrainerStalled != "" {
		progressing.Status = metav1.ConditionFalse
		progressing.Reason = tetherv1.ReasonTrainerStalled
		progressing.Message = Truncate(sig.TrainerStalled, MaxConditionMessageBytes)
	}
	return []metav1.Condition{
		cond(tetherv1.ConditionReady, st.Phase == tetherv1.PhaseRunning && st.Reason == tetherv1.ReasonHeartbeating ||
			st.Phase == tetherv1.PhaseSucceeded),
		cond(tetherv1.ConditionSucceeded, st.Phase == tetherv1.PhaseSucceeded),
		cond(tetherv1.ConditionFailed, st.Phase == tetherv1.PhaseFailed),
		progressing,
		cond(tetherv1.ConditionReconciling, !final),
		cond(tetherv1.ConditionStalled, st.Phase == tetherv1.PhaseFailed),
	}
}

// SetOutcomeConditions brings st's outcome conditions in line with its
// phase; every writer of a binding's status calls it last, on the status
// it writes. A condition's LastTransitionTime changes only when its status
// does (meta.SetStatusCondition). It reports whether anything changed.
func SetOutcomeConditions(st *tetherv1.WorkerBindingStatus, generation int64) bool {
	changed := false
	for _, c := range OutcomeConditions(st, signalsOf(st), generation) {
		if meta.SetStatusCondition(&st.Conditions, c) {
			changed = true
		}
	}
	return changed
}
