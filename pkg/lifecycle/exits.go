package lifecycle

import (
	"fmt"
	"time"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// Exit is one termination of a node's trainer container, from pod status.
type Exit struct {
	Code       int32
	Reason     string
	FinishedAt time.Time
}

// TrainerExited records an exit of the trainer container of node rank's pod
// podUID (state.terminated or lastState.terminated) and the container's
// restartCount. No exit is a verdict: the job's outcome is the TrainJob's
// (JobCompleted, JobFailed). A restart in place (restartCount above the one
// recorded) starts a new attempt. An exit is new when it finished after the
// node's last recorded one; newExit says so (the caller announces it with an
// Event). Exits of a pod that is not the node's in this attempt are ignored.
func TrainerExited(st *tetherv1.WorkerBindingStatus, rank int32, podUID string, e Exit, restartCount int32, now time.Time) (changed, newExit bool) {
	n := current(st, rank, podUID)
	if IsFinal(st.Phase) || n == nil {
		return false, false
	}
	isNew := n.LastExit == nil || e.FinishedAt.Truncate(time.Second).After(n.LastExit.FinishedAt.Time)
	if e.FinishedAt.IsZero() {
		// A runtime that reports no finish time: the exit is new unless the
		// node's last one is the same and was not followed by a restart.
		e.FinishedAt = now
		isNew = n.LastExit == nil || n.LastExit.Restarted || n.LastExit.ExitCode != e.Code
	}
	if isNew {
		x := tetherv1.TrainerExit{Rank: rank, PodName: n.PodName, ExitCode: e.Code, Reason: e.Reason,
			FinishedAt: metav1Time(e.FinishedAt), Attempt: st.Attempt}
		n.LastExit = &x
		last := x
		st.LastTrainerExit = &last
		code := e.Code
		st.TrainerExitCode = &code
		st.TrainerExits++
		changed, newExit = true, true
	}
	if restartCount > n.Restarts {
		rk := rank
		startAttempt(st, tetherv1.AttemptTrainerRestarted, &rk, restartCount-n.Restarts, now)
		n.Restarts = restartCount
		if n.LastExit != nil && !n.LastExit.Restarted {
			n.LastExit.Restarted = true
			if l := st.LastTrainerExit; l != nil && l.Rank == rank && l.FinishedAt.Equal(&n.LastExit.FinishedAt) {
				l.Restarted = true
			}
		}
		// The restarted trainer writes on; a manifest verdict of the run
		// before says nothing of it.
		n.Artifacts = nil
		aggregateArtifacts(st)
		changed = true
	}
	return derive(st) || changed, newExit
}

// DescribeExit is an exit for Events and messages.
func DescribeExit(st *tetherv1.WorkerBindingStatus, x *tetherv1.TrainerExit) string {
	reason := ""
	if x.Reason != "" {
		reason = " (" + x.Reason + ")"
	}
	where := "pod " + x.PodName
	if st.NodeCount > 1 {
		where = fmt.Sprintf("node %d (pod %s)", x.Rank, x.PodName)
	}
	return fmt.Sprintf("trainer on %s exited with code %d%s at %s", where, x.ExitCode, reason, x.FinishedAt.UTC().Format(time.RFC3339))
}

// ExitEvent is the Event announcing node rank's newly recorded exit.
func ExitEvent(st *tetherv1.WorkerBindingStatus, rank int32) (eventType, note string) {
	n := Node(st, rank)
	if n == nil || n.LastExit == nil {
		return "", ""
	}
	note = DescribeExit(st, n.LastExit)
	eventType = "Normal"
	if n.LastExit.ExitCode != 0 {
		eventType = "Warning"
	}
	if n.LastExit.Restarted {
		note += fmt.Sprintf("; restarted in place (restart %d), attempt %d", n.Restarts, st.Attempt)
	}
	return eventType, note
}

// JobFailed applies the TrainJob's Failed condition: the binding fails with
// the last trainer exit named (TrainerFailed) or, when no failing exit was
// seen, as JobFailed.
func JobFailed(st *tetherv1.WorkerBindingStatus, msg string) bool {
	if IsFinal(st.Phase) || Cancelling(st) {
		return false
	}
	x := st.LastTrainerExit
	if x == nil || x.ExitCode == 0 {
		return finish(st, tetherv1.PhaseFailed, tetherv1.ReasonJobFailed, msg)
	}
	history := fmt.Sprintf("%s; last %s", msg, DescribeExit(st, x))
	if st.TrainerExits > 1 {
		history += fmt.Sprintf("; %d trainer exits in %d attempts", st.TrainerExits, st.Attempt)
	}
	return finish(st, tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed, history)
}

// NeverBound fails a binding whose TrainJob finished (Complete or Failed)
// before any of its trainer pods was seen with the sidecar: nothing of the
// job was bound, whatever the TrainJob's own verdict. why says what ran.
func NeverBound(st *tetherv1.WorkerBindingStatus, why string) bool {
	if IsFinal(st.Phase) || st.Attempt > 0 {
		return false
	}
	return finish(st, tetherv1.PhaseFailed, tetherv1.ReasonNeverBound, why)
}

// JobCompleted applies the TrainJob's Complete condition: the binding
// succeeds once every bound node's manifest is verified, and until then is
// Finishing, awaiting its artifacts.
func JobCompleted(st *tetherv1.WorkerBindingStatus) bool {
	if IsFinal(st.Phase) || Cancelling(st) {
		return false
	}
	return gate(st)
}

// gate is the completion rule: the TrainJob is Complete (the phase says so)
// and every bound node's manifest is verified. It does not succeed the
// binding itself: a verified upload that overwrote an earlier version waits
// under its pending key until promoted (so a failed job's outputs never
// replace good ones), and Succeeded must not be seen while a final key
// still holds the older version. The controller promotes, then
// ArtifactsPromoted succeeds the binding.
func gate(st *tetherv1.WorkerBindingStatus) bool {
	if ManifestVerified(st) {
		return set(st, tetherv1.PhaseFinishing, tetherv1.ReasonPromotingArtifacts,
			"TrainJob complete and every artifact verified; putting the latest verified versions in place")
	}
	return set(st, tetherv1.PhaseFinishing, tetherv1.ReasonAwaitingArtifacts,
		"TrainJob complete; waiting for "+unverifiedNodes(st)+" to be verified")
}

// Promoting says whether the binding waits for its verified artifacts to be
// promoted over their final keys.
func Promoting(st *tetherv1.WorkerBindingStatus) bool {
	return st.Phase == tetherv1.PhaseFinishing && st.Reason == tetherv1.ReasonPromotingArtifacts
}

// ArtifactsPromoted succeeds a binding whose verified artifacts are all in
// place under their final keys.
func ArtifactsPromoted(st *tetherv1.WorkerBindingStatus) bool {
	if !Promoting(st) || !ManifestVerified(st) {
		return false
	}
	msg := "trainer exited 0 and every artifact is verified"
	if st.NodeCount > 1 {
		msg = fmt.Sprintf("TrainJob complete and the artifacts of all %d nodes are verified", st.NodeCount)
	}
	return finish(st, tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded, msg)
}

// PromotionFailed keeps the binding promoting and says why it has not
// succeeded yet.
func PromotionFailed(st *tetherv1.WorkerBindingStatus, err error) bool {
	if !Promoting(st) {
		return false
	}
	return set(st, tetherv1.PhaseFinishing, tetherv1.ReasonPromotingArtifacts,
		"every artifact verified, but putting the latest versions in place failed (retrying): "+err.Error())
}
