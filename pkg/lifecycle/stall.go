package lifecycle

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// A trainer stalls when its heartbeats go on (the sidecar and the pod are
// fine) but its step stands still: a hung collective, a dead data loader, a
// deadlock. HeartbeatLost cannot see that; the step's clock can.
//
// Only the controller declares a stall and clears it (Derive, on its own
// clock, so each Event is sent once); every other writer keeps what the
// status says (signalsOf). A status write that carries a new step wakes
// the controller, which clears the stall at once.
const (
	// MinStallWindow is the shortest default window: a checkpoint save or
	// an evaluation pass can hold the step for minutes.
	MinStallWindow = 15 * time.Minute
	// StallIntervals is the default window in median step intervals.
	StallIntervals = 10
)

// MergeProgress is node 0's next progress over prev: it carries when the
// step last changed (the binding server's clock, at) and the step interval
// when next has none.
func MergeProgress(prev, next *tetherv1.Progress, at time.Time) *tetherv1.Progress {
	out := next.DeepCopy()
	if prev == nil {
		prev = &tetherv1.Progress{}
	}
	if out.StepInterval == nil {
		out.StepInterval = prev.StepInterval
	}
	switch {
	case out.Step == nil:
		out.LastStepTime = prev.LastStepTime
	case prev.Step == nil || *prev.Step != *out.Step || prev.LastStepTime == nil:
		t := metav1.NewTime(at)
		out.LastStepTime = &t
	default:
		out.LastStepTime = prev.LastStepTime
	}
	return out
}

// StallWindow is how long the binding's step may stand still: the
// TrainJob's tether.dev/stall-after, else the larger of MinStallWindow and
// StallIntervals median step intervals.
func StallWindow(settings tetherv1.WorkerBindingSettings, p *tetherv1.Progress) time.Duration {
	if settings.StallAfter != nil && settings.StallAfter.Duration > 0 {
		return settings.StallAfter.Duration
	}
	w := MinStallWindow
	if p != nil && p.StepInterval != nil {
		w = max(w, StallIntervals*p.StepInterval.Duration)
	}
	return w
}

// Stalled reports whether the binding says its trainer stalled.
func Stalled(st *tetherv1.WorkerBindingStatus) bool {
	c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionProgressing)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == tetherv1.ReasonTrainerStalled
}

// StillStalled reports whether a declared stall still holds: the binding
// is live and no step was heard since the stall was declared.
func StillStalled(st *tetherv1.WorkerBindingStatus) bool {
	if !Stalled(st) || !stallWatched(st) {
		return false
	}
	c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionProgressing)
	return !st.Progress.LastStepTime.After(c.LastTransitionTime.Time)
}

// stallWatched: the trainer reports steps and its heartbeats arrive; a
// silent node is HeartbeatLost's, a finishing job's step stops by design.
func stallWatched(st *tetherv1.WorkerBindingStatus) bool {
	return st.Phase == tetherv1.PhaseRunning && st.Reason == tetherv1.ReasonHeartbeating &&
		st.Progress != nil && st.Progress.Step != nil && st.Progress.LastStepTime != nil
}

// checkStall declares a stall once the step stood still for the window
// (a Warning), and clears one the step moved past (a Normal Event). It
// returns when to look again (0: nothing to watch).
func checkStall(st *tetherv1.WorkerBindingStatus, settings tetherv1.WorkerBindingSettings, now time.Time, out *Outcome) time.Duration {
	was := Stalled(st)
	if !stallWatched(st) {
		if was {
			clearStall(st, "the job is "+string(st.Phase)+" ("+st.Reason+"): its step is not watched", now)
		}
		return 0
	}
	window := StallWindow(settings, st.Progress)
	still := now.Sub(st.Progress.LastStepTime.Time)
	switch {
	case was && StillStalled(st):
		return 0
	case still >= window:
		msg := fmt.Sprintf("step %d has not advanced for %s while the job's heartbeats go on (stall window %s)",
			*st.Progress.Step, still.Round(time.Second), window)
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tetherv1.ConditionProgressing, Status: metav1.ConditionFalse,
			Reason: tetherv1.ReasonTrainerStalled, Message: msg, LastTransitionTime: metav1.NewTime(now)})
		out.Warnings = append(out.Warnings, Event{corev1.EventTypeWarning, tetherv1.ReasonTrainerStalled, msg})
		return 0
	case was:
		msg := fmt.Sprintf("the trainer's step advanced again (step %d)", *st.Progress.Step)
		clearStall(st, msg, now)
		out.Events = append(out.Events, Event{corev1.EventTypeNormal, tetherv1.ReasonStepsResumed, msg})
	}
	return window - still + time.Second
}

// clearStall marks the binding progressing again (SetOutcomeConditions
// then gives the condition the phase's reason and message).
func clearStall(st *tetherv1.WorkerBindingStatus, msg string, now time.Time) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tetherv1.ConditionProgressing, Status: metav1.ConditionTrue,
		Reason: tetherv1.ReasonStepsResumed, Message: msg, LastTransitionTime: metav1.NewTime(now)})
}
