package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// v20TrainJobGVK is the TrainJob kind; objects are handled as unstructured,
// in Trainer v2.0.0's shape (the repository's Go types are v2.3.0's).
var v20TrainJobGVK = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}

// Scenario 8: scenario 1's happy path on Trainer v2.0.0's controller and
// CRDs, without Kueue, in a cluster of its own: a labeled TrainJob (created
// as v2.0.0 would accept it) is stamped, bound, its trainer pod injected; the
// worker registers, heartbeats with progress and uploads a checkpoint while
// training; the trainer exits 0, the manifest is verified and the binding
// succeeds; the TrainJob completes.
func TestScenario8TrainerV20(t *testing.T) {
	shared(t)
	timed(t)
	if os.Geteuid() != 0 {
		t.Skip("Trainer v2.0.0 runs in its own network and mount namespaces, which needs root")
	}
	ctx := context.Background()

	// A cluster of its own: Trainer v2.0.0, no Kueue; Tether with one
	// replica and the fs artifact backend. Its directory is not the default
	// tether-localcluster-* (a cleanup of those by another run would pull the
	// control plane's cert dir away mid-test); it is removed after the
	// cluster stopped unless TETHER_E2E_KEEP=1.
	setup := time.Now()
	keep := os.Getenv("TETHER_E2E_KEEP") == "1"
	clusterDir, err := os.MkdirTemp("", "tether-e2e-s8-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keep {
			logf("scenario 8: kept %s", clusterDir)
			return
		}
		if err := os.RemoveAll(clusterDir); err != nil {
			t.Errorf("removing %s: %v", clusterDir, err)
		}
	})
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir:            clusterDir,
		TrainerVersion: localcluster.TrainerV20,
		Log:            func(format string, args ...any) { logf("v2.0.0 cluster: "+format, args...) },
	})
	if err != nil {
		t.Fatalf("starting a local cluster with Trainer %s: %v", localcluster.TrainerV20, err)
	}
	t.Cleanup(func() {
		stop := time.Now()
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the Trainer v2.0.0 cluster: %v", err)
		}
		logf("scenario 8: cluster stopped in %.1fs", time.Since(stop).Seconds())
	})
	logf("scenario 8: Trainer %s cluster up in %.1fs (dir %s)", localcluster.TrainerV20, time.Since(setup).Seconds(), c.Dir)
	tether, err := c.StartTether(ctx, localcluster.TetherOptions{Replicas: 1, Args: controlPlaneArgs})
	if err != nil {
		t.Fatalf("starting Tether on the Trainer v2.0.0 cluster: %v", err)
	}
	if tether.ArtifactDir == "" {
		t.Fatal("Tether without S3 has no fs artifact directory")
	}
	plan := localcluster.TrainerPlan{Steps: 10, CheckpointEvery: 2, StepInterval: 800 * time.Millisecond}
	runner := c.NewPodRunner()
	runner.SidecarEnv = sidecarEnv
	runner.Plan = func(*corev1.Pod) localcluster.TrainerPlan { return plan }
	runner.Start(ctx)
	logf("scenario 8: cluster + Tether (1 replica, fs backend) up in %.1fs", time.Since(setup).Seconds())
	e := &env{c: c, tether: tether, runner: runner}

	ns := e.newNamespace(t, "v20-happy")
	const name = "llm-finetune-v20"

	// The TrainJob, in v2.0.0's shape; Tether's webhook stamps its identity.
	tj := v20TrainJob(name, ns)
	if err := c.Client.Create(ctx, tj); err != nil {
		t.Fatalf("creating the v2.0.0 TrainJob %s/%s: %v", ns, name, err)
	}
	jobID := tj.GetAnnotations()[names.JobIDAnnotation]
	workerID := tj.GetAnnotations()[names.WorkerIDAnnotation]
	if jobID == "" || workerID == "" {
		t.Fatalf("TrainJob webhook did not stamp %s and %s: annotations %v",
			names.JobIDAnnotation, names.WorkerIDAnnotation, tj.GetAnnotations())
	}
	if suspend, found, _ := unstructured.NestedBool(tj.Object, "spec", "suspend"); found && suspend {
		t.Fatalf("TrainJob suspended at creation without Kueue: spec %v", tj.Object["spec"])
	}
	e.waitBinding(t, ns, name, 30*time.Second, "binding created", func(wb *tetherv1.WorkerBinding) error {
		if wb.Spec.JobID != jobID || wb.Spec.WorkerID != workerID || wb.Spec.TrainJobName != name {
			return fmt.Errorf("spec %+v, want job id %q, worker id %q, TrainJob %q", wb.Spec, jobID, workerID, name)
		}
		return nil
	})

	// Routing on v2.0.0: the TrainJob webhook put tether.dev/bind in
	// spec.labels (v2.0 has no runtimePatches), Trainer copied it onto the
	// JobSet, Tether's JobSet webhook onto the trainer pod template.
	if v, _, _ := unstructured.NestedString(tj.Object, "spec", "labels", names.BindLabel); v != "true" {
		t.Fatalf("TrainJob spec.labels %v: want %s=true (Trainer v2.0 routing)", tj.Object["spec"], names.BindLabel)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(tj.Object, "spec", "runtimePatches"); found {
		t.Fatalf("spec.runtimePatches on a Trainer v2.0 TrainJob: %v", tj.Object["spec"])
	}

	// Trainer v2.0.0 makes the JobSet; the trainer pod is injected.
	pod := e.injectedPod(t, ns, name, "")
	if pod.Labels[names.BindLabel] != "true" {
		t.Fatalf("injected pod %s lacks %s=true: labels %v", pod.Name, names.BindLabel, pod.Labels)
	}
	if len(pod.Spec.InitContainers) == 0 {
		t.Fatalf("injected pod %s has no init containers: %+v", pod.Name, pod.Spec)
	}
	sidecar := pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1]
	if sidecar.Name != mutate.SidecarName || sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("last init container of %s is %q with restartPolicy %v, want native sidecar %q with restartPolicy Always",
			pod.Name, sidecar.Name, sidecar.RestartPolicy, mutate.SidecarName)
	}
	if !v20HasContainer(pod, "node") {
		t.Fatalf("pod %s has no trainer container \"node\" from the runtime: containers %v", pod.Name, pod.Spec.Containers)
	}

	// Registered, then heartbeating with progress.
	wb := e.waitBinding(t, ns, name, 60*time.Second, "registered and heartbeating", phaseIs(tetherv1.PhaseRunning, ""))
	if wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(pod.UID) {
		t.Fatalf("registered worker %+v, want pod %s (%s)", wb.Status.Worker, pod.Name, pod.UID)
	}
	first := wb.Status.LastHeartbeatTime
	e.waitBinding(t, ns, name, 30*time.Second, "progress and newer heartbeats", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Progress == nil || wb.Status.Progress.Step == nil || *wb.Status.Progress.Step < 2 {
			return fmt.Errorf("progress %+v, want step >= 2", wb.Status.Progress)
		}
		if first == nil || wb.Status.LastHeartbeatTime == nil || !wb.Status.LastHeartbeatTime.After(first.Time) {
			return fmt.Errorf("last heartbeat %v, want later than %v", wb.Status.LastHeartbeatTime, first)
		}
		return nil
	})

	// A checkpoint is stored (same MD5 as the trainer's file) while the
	// trainer still runs; then exit 0, the manifest verified: Succeeded.
	e.expectCheckpointDuringTraining(t, pod, jobID)
	wb, _ = e.expectSucceededWithArtifacts(t, pod, name, jobID)
	a := wb.Status.Artifacts

	// Trainer v2.0.0 copies the JobSet's completion onto the TrainJob.
	eventually(t, 60*time.Second, "TrainJob condition Complete=True", func() error {
		conds := v20TrainJobConditions(t, c, ns, name)
		if !meta.IsStatusConditionTrue(conds, "Complete") {
			return fmt.Errorf("conditions %v", v20CondSummary(conds))
		}
		return nil
	})
	eventually(t, 20*time.Second, "Events on the TrainJob", func() error {
		// Not queued: the pod exists by the binding's first status write,
		// which is the attempt's start, so "Bound" announces the token.
		return hasAll(e.eventReasons(t, ns, name), "Bound", "Injected", "Registered", "TrainerSucceeded")
	})
	eventually(t, 20*time.Second, "tether_job_phase{phase=Succeeded} in /metrics", func() error {
		if v, ok := e.metricValue(t, "tether_job_phase", append(jobLabels(ns, name), `phase="Succeeded"`)...); !ok || v != 1 {
			return fmt.Errorf("tether_job_phase{namespace=%q,trainjob=%q,phase=\"Succeeded\"}=%v (present %v), want 1", ns, name, v, ok)
		}
		return nil
	})
	logf("scenario 8: Trainer %s: %d files, %d bytes verified; manifest %s; TrainJob conditions %v",
		localcluster.TrainerV20, a.Files, a.Bytes, a.Manifest, v20CondSummary(v20TrainJobConditions(t, c, ns, name)))
}

// v20TrainJob is a bound TrainJob on the e2e runtime as Trainer v2.0.0's CRD
// takes it: runtimeRef only (no trainer, podSpecOverrides or queue).
func v20TrainJob(name, ns string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name":        name,
			"namespace":   ns,
			"labels":      map[string]any{names.BindLabel: names.BindValue},
			"annotations": map[string]any{names.HeartbeatIntervalAnnotation: "1s"},
		},
		"spec": map[string]any{
			"runtimeRef": map[string]any{
				"name":     localcluster.RuntimeName,
				"apiGroup": "trainer.kubeflow.org",
				"kind":     "ClusterTrainingRuntime",
			},
		},
	}}
	u.SetGroupVersionKind(v20TrainJobGVK)
	return u
}

// v20TrainJobConditions reads the TrainJob's status.conditions.
func v20TrainJobConditions(t *testing.T, c *localcluster.Cluster, ns, name string) []metav1.Condition {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v20TrainJobGVK)
	if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
		t.Fatalf("getting TrainJob %s/%s: %v", ns, name, err)
	}
	raw, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		t.Fatalf("TrainJob %s/%s status.conditions: %v", ns, name, err)
	}
	var conds []metav1.Condition
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var cond metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond); err != nil {
			t.Fatalf("TrainJob %s/%s condition %v: %v", ns, name, m, err)
		}
		conds = append(conds, cond)
	}
	return conds
}

func v20CondSummary(conds []metav1.Condition) []string {
	var out []string
	for _, c := range conds {
		out = append(out, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return out
}

func v20HasContainer(pod *corev1.Pod, name string) bool {
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name == name {
			return true
		}
	}
	return false
}
