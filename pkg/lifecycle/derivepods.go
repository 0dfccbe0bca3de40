package lifecycle

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// observePods applies each bound node's injected pod to the status: a new
// attempt, its trainer container's exits and in-place restarts. suspended:
// the TrainJob is. It returns what to announce beyond a phase transition.
func observePods(st *tetherv1.WorkerBindingStatus, settings tetherv1.WorkerBindingSettings, pods []corev1.Pod, suspended bool, now time.Time) []Event {
	var events []Event
	for _, p := range boundPods(pods, settings) {
		// Only a rank's newest pod is its pod: an older one (failed, being
		// replaced) only has its exits recorded while it is still the node's.
		// A pod being deleted or disrupted, or of a suspended job, is on its
		// way out: it starts no attempt (a preempted job's pods are).
		// A cancelled binding is resumed only by a live pod (cancel.go).
		if p.newest && !suspended && !disrupted(p.pod) && !(Resumable(st) && leaving(p.pod)) {
			// An attempt that moved the phase to Pending/AttemptStarted is
			// announced by that transition's Event; one that did not (a
			// replaced pod beside running nodes) needs its own.
			previous := InPlaceOf(Node(st, p.seen.Rank), p.seen.UID)
			_, started := PodSeen(st, p.seen, false, now)
			if started != "" && !(st.Phase == tetherv1.PhasePending && st.Reason == tetherv1.ReasonAttemptStarted) {
				o := attemptObservation(st, started)
				if started == tetherv1.AttemptPodReplaced {
					o.Note += previous
				}
				events = append(events, o)
			}
		}
		if disrupted(p.pod) {
			// Deleted or disrupted (preemption, eviction, drain): its SIGTERM
			// exit (143) is not a verdict on the training, and the job-level
			// outcome decides.
			continue
		}
		cs := containerStatus(p.pod, settings.TrainerContainer)
		if cs == nil {
			continue
		}
		// The exit before the last restart first, then the current one.
		for _, t := range []*corev1.ContainerStateTerminated{cs.LastTerminationState.Terminated, cs.State.Terminated} {
			if t == nil {
				continue
			}
			// restartCount counts the restarts so far: those after the last
			// termination, none yet after the current one.
			before := st.Attempt
			_, isNew := TrainerExited(st, p.seen.Rank, p.seen.UID, Exit{Code: t.ExitCode, Reason: t.Reason, FinishedAt: t.FinishedAt.Time},
				cs.RestartCount, now)
			if isNew {
				eventType, note := ExitEvent(st, p.seen.Rank)
				events = append(events, Event{eventType, tetherv1.ReasonTrainerExited, note})
			}
			if st.Attempt != before {
				o := attemptObservation(st, tetherv1.AttemptTrainerRestarted)
				if n := Node(st, p.seen.Rank); n != nil && n.LastExit != nil {
					o.Note += fmt.Sprintf(": the kubelet restarted the trainer in place (restart %d) after it %s",
						n.Restarts, strings.TrimPrefix(DescribeExit(st, n.LastExit), "trainer on pod "+n.PodName+" "))
				}
				events = append(events, o)
			}
		}
	}
	return events
}

// neverBoundMessage says why a TrainJob that ended (typ Complete or
// Failed) was never bound, from the PodsInjected evidence.
func neverBoundMessage(st *tetherv1.WorkerBindingStatus, typ string) string {
	msg := fmt.Sprintf("the TrainJob is %s, but none of its trainer pods ever ran with the Tether sidecar: nothing was bound", typ)
	if c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionPodsInjected); c != nil && c.Status == metav1.ConditionFalse {
		msg += "; " + c.Message
	}
	return msg
}

// boundPod is an injected trainer pod of a bound node.
type boundPod struct {
	pod  *corev1.Pod
	seen Pod
	// newest is true for the newest pod of its rank.
	newest bool
}

// boundPods are the job's injected trainer pods of bound nodes, oldest
// first, so that a replacement is seen after the pod it replaces.
func boundPods(pods []corev1.Pod, settings tetherv1.WorkerBindingSettings) []boundPod {
	var out []boundPod
	for i := range pods {
		p := &pods[i]
		if !trainjob.IsInjected(p) {
			continue
		}
		rank, err := trainjob.Rank(p)
		if err != nil || rank >= binding.MaxBoundNodes || rank > 0 && settings.Nodes == jobconfig.NodesPrimary {
			continue
		}
		out = append(out, boundPod{pod: p, seen: Pod{Rank: int32(rank), Name: p.Name, UID: string(p.UID),
			NodeName: p.Spec.NodeName, RestartAttempt: trainjob.RestartAttempt(p)}})
	}
	sort.SliceStable(out, func(a, b int) bool {
		pa, pb := out[a].pod, out[b].pod
		ta, tb := pa.CreationTimestamp, pb.CreationTimestamp
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		// Created within the same second (the timestamps' resolution): a
		// later JobSet restart attempt is the newer, and a pod going away
		// is older than one that is not (a replacement of a pod that failed
		// or was deleted at once); the name decides only a tie left.
		if ra, rb := out[a].seen.RestartAttempt, out[b].seen.RestartAttempt; ra != rb {
			return ra < rb
		}
		if la, lb := leaving(pa), leaving(pb); la != lb {
			return la
		}
		return pa.Name < pb.Name
	})
	seen := map[int32]bool{}
	for i := len(out) - 1; i >= 0; i-- {
		if r := out[i].seen.Rank; !seen[r] {
			seen[r], out[i].newest = true, true
		}
	}
	return out
}

// leaving says the pod is being deleted or has ended.
func leaving(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func attemptObservation(st *tetherv1.WorkerBindingStatus, by string) Event {
	note := fmt.Sprintf("attempt %d started: %s", st.Attempt, by)
	if st.AttemptNode != nil && st.NodeCount > 1 {
		note += fmt.Sprintf(" (node %d)", *st.AttemptNode)
	}
	return Event{corev1.EventTypeNormal, tetherv1.ReasonAttemptStarted, note}
}

// disrupted reports whether the pod is being deleted or was marked for
// disruption by the control plane (condition DisruptionTarget).
func disrupted(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
