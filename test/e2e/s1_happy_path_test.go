package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 1: a labeled TrainJob in a Kueue queue is suspended, admitted,
// its pod injected; the worker registers, heartbeats, reports progress and
// uploads checkpoints while training; the trainer exits 0, the manifest is
// verified and the binding succeeds.
func TestScenario1HappyPathWithKueue(t *testing.T) {
	shared(t)
	timed(t)
	ns := suite.newNamespace(t, "happy")
	const name = "llm-finetune"
	// 2 MiB checkpoints: over the sidecar's direct-upload threshold, so
	// they go straight to the S3 store (presigned PUT, then commit).
	const checkpoints = 5
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 10, CheckpointEvery: 10 / checkpoints, StepInterval: 800 * time.Millisecond,
		CheckpointBytes: 2 << 20})
	tj := bound(trainJob(name, ns)).Queue("user-queue").Obj()
	suite.create(t, tj)

	// Kueue's webhook suspended it; Tether's stamped the binding identity.
	if !ptr.Deref(tj.Spec.Suspend, false) {
		t.Fatalf("Kueue did not suspend the queued TrainJob at creation: spec.suspend=%v", tj.Spec.Suspend)
	}
	jobID := tj.Annotations[names.JobIDAnnotation]
	if jobID == "" || tj.Annotations[names.WorkerIDAnnotation] == "" {
		t.Fatalf("TrainJob webhook did not stamp identity: %v", tj.Annotations)
	}
	suite.waitBinding(t, ns, name, 30*time.Second, "binding created while queued", func(wb *tetherv1.WorkerBinding) error {
		if wb.Spec.JobID != jobID {
			return fmt.Errorf("job id %q, want %q", wb.Spec.JobID, jobID)
		}
		return nil
	})

	// Kueue admits: the TrainJob is unsuspended and its pod is injected.
	eventually(t, 60*time.Second, "Kueue admits the TrainJob", func() error {
		if got := suite.getTrainJob(t, ns, name); ptr.Deref(got.Spec.Suspend, false) {
			return fmt.Errorf("still suspended")
		}
		return nil
	})
	pod := suite.injectedPod(t, ns, name, "")
	if pod.Labels["kueue.x-k8s.io/podset"] == "" {
		t.Errorf("pod %s has no kueue.x-k8s.io/podset label: was it admitted by Kueue? labels %v", pod.Name, pod.Labels)
	}
	sidecar := pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1]
	if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != "Always" {
		t.Fatalf("injected container %s is not a native sidecar", sidecar.Name)
	}

	// Registered, then heartbeating with progress, on the binding and in /metrics.
	wb := suite.waitBinding(t, ns, name, 60*time.Second, "registered and heartbeating", phaseIs(tetherv1.PhaseRunning, ""))
	if wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(pod.UID) {
		t.Fatalf("registered worker %+v, want pod %s", wb.Status.Worker, pod.UID)
	}
	first := wb.Status.LastHeartbeatTime.Time
	checkSidecarDialsService(t, pod.UID)
	// What a 1-node job costs the control plane, to compare with scenario 12's 4 nodes.
	writes := suite.countWrites(t, ns, name)
	suite.waitBinding(t, ns, name, 30*time.Second, "progress and newer heartbeats", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Progress == nil || wb.Status.Progress.Step == nil || *wb.Status.Progress.Step < 2 {
			return fmt.Errorf("no progress yet")
		}
		if !wb.Status.LastHeartbeatTime.After(first) {
			return fmt.Errorf("heartbeat time not advancing")
		}
		return nil
	})
	eventually(t, 20*time.Second, "per-job series in /metrics", func() error {
		if v, ok := suite.metricValue(t, "tether_job_session_connected", jobLabels(ns, name)...); !ok || v != 1 {
			return fmt.Errorf("tether_job_session_connected=%v (present %v)", v, ok)
		}
		if v, ok := suite.metricValue(t, "tether_job_progress_step", jobLabels(ns, name)...); !ok || v < 2 {
			return fmt.Errorf("tether_job_progress_step=%v", v)
		}
		if v, ok := suite.metricValue(t, "tether_job_heartbeat_age_seconds", jobLabels(ns, name)...); !ok || v > 5 {
			return fmt.Errorf("tether_job_heartbeat_age_seconds=%v", v)
		}
		if v, ok := suite.metricValue(t, "tether_job_phase", append(jobLabels(ns, name), `phase="Running"`)...); !ok || v != 1 {
			return fmt.Errorf("tether_job_phase{phase=Running}=%v", v)
		}
		return nil
	})

	// A checkpoint is stored, verified, while the trainer still runs; then
	// the trainer exits 0, the manifest is verified: Succeeded.
	suite.expectCheckpointDuringTraining(t, pod, jobID)
	wb, local := suite.expectSucceededWithArtifacts(t, pod, name, jobID)
	nWrites, perMinute := writes.PerMinute()
	writes.Stop()
	a := wb.Status.Artifacts
	eventually(t, 60*time.Second, "TrainJob Complete", func() error {
		if !meta.IsStatusConditionTrue(suite.getTrainJob(t, ns, name).Status.Conditions, "Complete") {
			return fmt.Errorf("not Complete")
		}
		return nil
	})
	eventually(t, 20*time.Second, "Events on the TrainJob", func() error {
		// Bound announces the token Secret and binding (docs/platform.md);
		// the Pending/TokenIssued phase is announced only if a status
		// write catches it before the sidecar registers, which a loaded
		// controller may not (seen in CI: the first write was already past it).
		return hasAll(suite.eventReasons(t, ns, name), "Bound", "Injected", "Registered", "TrainerSucceeded")
	})
	eventually(t, 20*time.Second, "phase and bytes in /metrics", func() error {
		if v, ok := suite.metricValue(t, "tether_job_phase", append(jobLabels(ns, name), `phase="Succeeded"`)...); !ok || v != 1 {
			return fmt.Errorf("tether_job_phase{phase=Succeeded}=%v", v)
		}
		if v, ok := suite.metricValue(t, "tether_artifacts_verified_files_total"); !ok || v < float64(len(local)) {
			return fmt.Errorf("tether_artifacts_verified_files_total=%v, want >= %d", v, len(local))
		}
		if v, ok := suite.metricValue(t, "tether_artifacts_direct_files_total"); !ok || v < checkpoints {
			return fmt.Errorf("tether_artifacts_direct_files_total=%v, want >= %d: the checkpoints did not go straight to the store", v, checkpoints)
		}
		return nil
	})
	logf("scenario 1: %d files, %d bytes verified; manifest %s; %d status writes from Running to Succeeded (%.1f/min)",
		a.Files, a.Bytes, a.Manifest, nWrites, perMinute)
}

// checkSidecarDialsService: on the cluster network, the kwok pod's sidecar
// (a host process) runs in the kwok pods' network namespace with the URL
// the webhook injected, the Service's DNS name: it registered by that name,
// through kube-proxy and CoreDNS, not by an address the harness wrote.
func checkSidecarDialsService(t *testing.T, pod types.UID) {
	t.Helper()
	holder, err := suite.c.HostPodsPID()
	if err != nil {
		t.Logf("sidecar's network not checked: %v", err)
		return
	}
	p := suite.runner.RunningSidecar(pod)
	if p == nil {
		t.Fatalf("pod %s has no running sidecar", pod)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	want := names.EnvServerURL + "=" + localcluster.ControlPlaneBindingURL
	if !slices.Contains(strings.Split(string(environ), "\x00"), want) {
		t.Errorf("the sidecar (pid %d) runs without %s", p.PID(), want)
	}
	own, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.PID()))
	kwok, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", holder))
	if err1 != nil || err2 != nil || own != kwok {
		t.Errorf("the sidecar's network namespace %s (%v), want the kwok pods' %s (%v)", own, err1, kwok, err2)
	}
}
