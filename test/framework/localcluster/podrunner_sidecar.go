package localcluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/pkg/trainjob"
)

// The kubelet's part for a native sidecar (restartPolicy Always) that exits
// while its pod runs: PodRunner starts it again and records the restart.

// sidecarRestartDelay is how long an exited sidecar stays down before its
// restart-th restart (1-based), as the kubelet backs off a container's
// restarts: the first within its sync, then 10 s doubling up to 5 minutes.
func sidecarRestartDelay(restart int) time.Duration {
	if restart <= 1 {
		return time.Second
	}
	return min(10*time.Second<<min(restart-2, 5), 5*time.Minute)
}

// keepSidecar starts the pod's sidecar again each time it exits while the
// pod is not finishing, as the kubelet does with a native sidecar, and
// counts the restart in the pod's status.
func (r *PodRunner) keepSidecar(ctx context.Context, rp *runningPod) {
	for {
		r.mu.Lock()
		s := rp.sidecar
		r.mu.Unlock()
		select {
		case <-s.Done():
		case <-r.stop:
			return
		}
		r.mu.Lock()
		delay := sidecarRestartDelay(rp.sidecarRestarts + 1)
		r.mu.Unlock()
		select {
		case <-time.After(delay):
		case <-r.stop:
			return
		}
		r.mu.Lock()
		stopped := false
		select {
		case <-r.stop:
			stopped = true
		default:
		}
		if stopped || rp.finishing || rp.finished {
			r.mu.Unlock()
			return
		}
		next, err := rp.sidecarStart()
		if err != nil {
			r.mu.Unlock()
			r.c.Opts.Log("pod %s: starting its sidecar again: %v", rp.key, err)
			return
		}
		rp.sidecar = next
		rp.sidecarRestarts++
		restarts, code := rp.sidecarRestarts, exitCode(s)
		r.mu.Unlock()
		r.c.Opts.Log("pod %s: sidecar exited (%d) and started again (restart %d)", rp.key, code, restarts)
		_ = r.updateStatus(ctx, rp.key, func(pod *corev1.Pod) { setSidecarRestarted(pod, int32(restarts), code) })
	}
}

// setSidecarRestarted records a restart of the injected sidecar: its count,
// and the instance that ended as its last state.
func setSidecarRestarted(pod *corev1.Pod, restarts, code int32) {
	now := metav1.Now()
	for i := range pod.Status.InitContainerStatuses {
		s := &pod.Status.InitContainerStatuses[i]
		if s.Name != trainjob.SidecarContainer {
			continue
		}
		s.RestartCount = restarts
		s.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason(code), FinishedAt: now}}
		s.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	}
}
