package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// observe applies what the controller can see to the binding's status: the
// trainer container's exit from the bound pod's status (the sidecar never
// learns it), then the TrainJob's conditions. It returns the duration after
// which a silent worker counts as HeartbeatLost (0: not applicable).
func (r *BindingReconciler) observe(tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, pods []corev1.Pod, now time.Time) time.Duration {
	st := &wb.Status
	settings := lifecycle.Settings(&wb.Spec)
	if code, ok := trainerExit(pods, st, settings.TrainerContainer); ok {
		lifecycle.TrainerExited(st, code)
	}
	conds := trainjob.Conditions(tj)
	if c := meta.FindStatusCondition(conds, trainjob.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		lifecycle.JobFailed(st, fmt.Sprintf("TrainJob failed: %s", c.Message))
	}
	// Exit 0 waits for the artifacts; once the pod is over and the grace for
	// the manifest's status write has passed, what is missing is named.
	if st.Phase == tetherv1.PhaseFinishing && st.Reason == tetherv1.ReasonAwaitingArtifacts {
		if ended, at := podEnded(pods, st); ended {
			if wait := at.Add(r.ArtifactGrace).Sub(now); wait > 0 {
				return wait
			}
			lifecycle.ArtifactsIncomplete(st, lifecycle.MissingArtifacts(st))
		}
	}
	if c := meta.FindStatusCondition(conds, trainjob.ConditionSuspended); c != nil {
		if c.Status == metav1.ConditionTrue {
			lifecycle.Suspended(st, "TrainJob suspended: "+c.Reason)
		} else {
			lifecycle.Resumed(st)
		}
	}

	// A worker whose replica crashed is caught here: nobody holds its session,
	// and its last recorded heartbeat ages past the budget.
	if st.Phase != tetherv1.PhaseRegistered && st.Phase != tetherv1.PhaseRunning {
		return 0
	}
	budget := r.StatusInterval + time.Duration(r.MissedHeartbeats)*settings.HeartbeatInterval.Duration
	last := st.LastHeartbeatTime
	if last == nil && st.Worker != nil {
		last = &st.Worker.RegisteredTime
	}
	if last == nil {
		return 0
	}
	if age := now.Sub(last.Time); age > budget {
		lifecycle.HeartbeatLost(st, fmt.Sprintf("no heartbeat recorded for %s", age.Round(time.Second)))
		return budget
	} else {
		return budget - age + time.Second
	}
}

// podEnded reports whether the attempt's injected pod has ended (phase
// Succeeded or Failed, or no longer there), and when its last container
// finished.
func podEnded(pods []corev1.Pod, st *tetherv1.WorkerBindingStatus) (bool, time.Time) {
	for i := range pods {
		p := &pods[i]
		if p.Annotations[jobconfig.PodStatusAnnotation] == "" || (st.Worker != nil && string(p.UID) != st.Worker.PodUID) {
			continue
		}
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return false, time.Time{}
		}
		var last time.Time
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(last) {
				last = t.FinishedAt.Time
			}
		}
		return true, last
	}
	// No pod of this attempt remains: it ended.
	return st.Worker != nil, time.Time{}
}

// trainerExit finds the trainer container's termination in the attempt's
// registered pod (or, before registration, the job's injected node-0 pod).
// A pod that was deleted or disrupted (preemption, eviction, drain) did not
// end by the trainer's own exit: its SIGTERM code (143) is not a verdict on
// the training, and the job-level outcome decides (Suspended → Preempted, or
// the TrainJob's Failed condition).
func trainerExit(pods []corev1.Pod, st *tetherv1.WorkerBindingStatus, container string) (int32, bool) {
	for i := range pods {
		p := &pods[i]
		if p.Annotations[jobconfig.PodStatusAnnotation] == "" || disrupted(p) {
			continue
		}
		if st.Worker != nil && string(p.UID) != st.Worker.PodUID {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == container && cs.State.Terminated != nil {
				return cs.State.Terminated.ExitCode, true
			}
		}
	}
	return 0, false
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
