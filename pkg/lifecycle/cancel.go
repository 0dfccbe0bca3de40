package lifecycle

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// A cancel is two acts of the orchestrator: the cancel command (every node
// flushes, and the binding server records the answer in
// status.lastCommand), then the stop, made with the orchestrator's own
// credentials (its Kueue Workload deactivated, the TrainJob suspended or
// deleted: pkg/client Cancel). The binding says what the controller sees of
// it: Finishing/Cancelling once the command is answered while trainer pods
// remain, Failed/Cancelled once none does. A job suspended without a cancel
// is preempted, as ever.
//
// Failed/Cancelled is the one final verdict a resumption leaves: a job
// stopped by a cancel can be resumed (its Workload activated again, the
// TrainJob unsuspended), and its next pod starts a new attempt, as after a
// preemption (Resumable).

// cancelOf is the cancel command that ends the current attempt, or nil:
// status.lastCommand is a cancel every node answered (acknowledged, or
// failed: the stop follows a failed flush too), or one still unanswered
// while the TrainJob is suspended (the orchestrator stopped the job when the
// answer did not come in time); and it was sent in the current attempt (an
// earlier attempt's cancel, resumed since, ends nothing now).
func cancelOf(st *tetherv1.WorkerBindingStatus, suspended bool) *tetherv1.CommandStatus {
	c := st.LastCommand
	if c == nil || c.Name != binding.CommandCancel {
		return nil
	}
	if c.State == tetherv1.CommandSent && !suspended {
		return nil
	}
	switch {
	case c.Attempt > 0 && c.Attempt < st.Attempt:
		return nil
	case c.Attempt == 0 && c.Time != nil && st.AttemptStartTime != nil && !c.Time.After(st.AttemptStartTime.Time):
		// Recorded without its attempt (before the job's first pod, or by
		// an older binding server): times are kept to the second, so one
		// in the attempt's first second is taken for the attempt before.
		return nil
	}
	return c
}

// Cancelling reports whether the binding waits for a cancelled job's
// trainer pods to go.
func Cancelling(st *tetherv1.WorkerBindingStatus) bool {
	return st.Phase == tetherv1.PhaseFinishing && st.Reason == tetherv1.ReasonCancelling
}

// Resumable reports whether a final binding may still start a new attempt:
// only Failed/Cancelled, whose job the orchestrator stopped in a way that can
// be undone.
func Resumable(st *tetherv1.WorkerBindingStatus) bool {
	return st.Phase == tetherv1.PhaseFailed && st.Reason == tetherv1.ReasonCancelled
}

// observeCancel moves a cancelled job's binding: Finishing/Cancelling while
// any trainer pod remains (pods: the job's, as the controller lists them),
// Failed/Cancelled once none does. suspended: the TrainJob is. It reports
// whether anything changed.
func observeCancel(st *tetherv1.WorkerBindingStatus, pods []corev1.Pod, suspended bool) bool {
	if IsFinal(st.Phase) {
		return false
	}
	c := cancelOf(st, suspended)
	if c == nil && !Cancelling(st) {
		return false
	}
	what := "the orchestrator's cancel"
	if c != nil {
		what = fmt.Sprintf("cancel %s %s", c.ID, cancelAnswer(c))
	}
	if n := remainingPods(pods); n > 0 {
		return set(st, tetherv1.PhaseFinishing, tetherv1.ReasonCancelling,
			fmt.Sprintf("%s; waiting for %d trainer pod(s) to go (the orchestrator stops the job: Kueue Workload deactivated, TrainJob suspended or deleted)", what, n))
	}
	return Cancelled(st, "cancelled by the orchestrator: "+what+"; no trainer pod remains")
}

func cancelAnswer(c *tetherv1.CommandStatus) string {
	switch c.State {
	case tetherv1.CommandAcknowledged:
		return "acknowledged: every node flushed"
	case tetherv1.CommandFailed:
		return "failed: " + c.Message
	}
	return "not answered before the job was stopped"
}

// remainingPods counts the trainer pods that have not ended: a pod being
// deleted still holds its node's resources until it is gone.
func remainingPods(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if p := pods[i].Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			n++
		}
	}
	return n
}

// knownPod reports whether uid is a node's pod in the status.
func knownPod(st *tetherv1.WorkerBindingStatus, uid string) bool {
	for i := range st.Nodes {
		if st.Nodes[i].PodUID == uid {
			return true
		}
	}
	return false
}

// resumeCancelled reopens a Failed/Cancelled binding for pod uid, a pod it
// has not seen: the job was resumed after its cancel. The binding goes back
// to Pending/Preempted (PodSeen starts the readmission attempt), and the
// upload sweep's record is dropped (a live binding is never swept), so the
// next end gets its own deadline and sweep. It reports whether it reopened.
func resumeCancelled(st *tetherv1.WorkerBindingStatus, uid string) bool {
	if !Resumable(st) || knownPod(st, uid) {
		return false
	}
	st.DirectUploads = nil
	return set(st, tetherv1.PhasePending, tetherv1.ReasonPreempted,
		fmt.Sprintf("attempt %d was cancelled; the job was resumed", st.Attempt))
}
