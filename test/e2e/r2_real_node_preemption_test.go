package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real node, scenario 2: Kueue preempts a bound TrainJob on the real node.
// The kubelet sends SIGTERM to the trainer, then to the sidecar, which
// flushes every finished file within the grace period; the binding is
// Preempted. Re-admitted, the job runs in a new pod, resumes from its last
// checkpoint on the same PersistentVolumeClaim, does not send the verified
// files again, and succeeds.
func TestRealNode2Preemption(t *testing.T) {
	needRealNode(t)
	timed(t)
	ctx := context.Background()
	ns := suite.realNodeNamespace(t, "real-preempt")
	const name, rival = "real-low-prio", "real-high-prio"
	// Two of these do not fit the real nodes' queue (2 CPUs); one does.
	trainerSize := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1100m"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	patch, dir := suite.persistentArtifacts(t, ns, name)
	plan := localcluster.TrainerPlan{Steps: 60, CheckpointEvery: 3, StepInterval: time.Second, Resume: true}
	low := bound(realTrainJob(name, ns, plan)).PriorityClass("low").ResourcesPerNode(trainerSize).NodePatch(patch).Obj()
	suite.create(t, low)
	jobID := low.Annotations[names.JobIDAnnotation]
	first := suite.waitRunningOnRealNode(t, suite.injectedPod(t, ns, name, ""))
	wb := suite.waitBinding(t, ns, name, 90*time.Second, "Running", phaseIs(tetherv1.PhaseRunning, ""))
	bindingUID := wb.UID
	eventually(t, 60*time.Second, "two checkpoints verified", func() error {
		n := 0
		stored := suite.stored(t, jobID)
		for rel, sum := range localFiles(t, dir) {
			if strings.HasPrefix(rel, "checkpoints/") && stored[rel] == sum {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d verified", n)
		}
		return nil
	})

	// A higher-priority job needs the real nodes' quota: Kueue preempts the
	// bound one; the kubelet stops its pod.
	suite.create(t, realTrainJob(rival, ns, localcluster.TrainerPlan{Steps: 2, StepInterval: 100 * time.Millisecond}).
		PriorityClass("high").ResourcesPerNode(trainerSize).Obj())
	suite.waitBinding(t, ns, name, 90*time.Second, "Preempted", phaseIs(tetherv1.PhasePending, tetherv1.ReasonPreempted))
	var exit *corev1.ContainerStateTerminated
	eventually(t, 90*time.Second, "the preempted pod gone (sidecar flushed and exited)", func() error {
		if p := suite.podNow(t, ns, first.Name); p != nil {
			if s := containerStatus(p, "node"); s != nil && s.State.Terminated != nil {
				exit = s.State.Terminated
			}
			return fmt.Errorf("pod %s still exists", first.Name)
		}
		return nil
	})
	if exit != nil && exit.ExitCode != 143 {
		t.Errorf("the trainer ended with %d, want 143 (the kubelet's SIGTERM)", exit.ExitCode)
	}
	afterFirst := localFiles(t, dir)
	// A file uploaded again (the progress file, on every close) waits under
	// its pending key until the job succeeds: the latest versions count.
	if err := sameFiles(afterFirst, suite.storedLatest(t, jobID)); err != nil {
		t.Fatalf("after preemption, not every finished file was flushed: %v", err)
	}
	if p := suite.getTrainJob(t, ns, name); !ptr.Deref(p.Spec.Suspend, false) {
		t.Error("the preempted TrainJob is not suspended")
	}
	eventually(t, 20*time.Second, "Preempted Event", func() error { return hasAll(suite.eventReasons(t, ns, name), "Preempted") })
	storedBefore := suite.lastModified(t, jobID)
	putsBefore, _ := suite.metricValue(t, "tether_artifacts_verified_files_total")
	logf("real node 2: attempt 1 preempted with %d files, all stored", len(afterFirst))

	// The rival leaves; the job is admitted again and resumes in a new pod.
	if err := suite.c.Client.Delete(ctx, suite.getTrainJob(t, ns, rival)); err != nil {
		t.Fatal(err)
	}
	second := suite.injectedPod(t, ns, name, first.UID)
	wb = suite.waitBinding(t, ns, name, 180*time.Second, "Succeeded on attempt 2", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	if wb.UID != bindingUID || wb.Status.Attempt != 2 || wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(second.UID) {
		t.Fatalf("binding uid %s attempt %d worker %+v; want the same binding %s, attempt 2, pod %s",
			wb.UID, wb.Status.Attempt, wb.Status.Worker, bindingUID, second.UID)
	}
	final := localFiles(t, dir)
	if err := sameAsStored(final, suite.stored(t, jobID)); err != nil {
		t.Fatalf("after attempt 2: %v", err)
	}
	if _, ok := final["model/final.safetensors"]; !ok {
		t.Fatalf("no final model: %v", final)
	}
	changed := suite.expectOnlyChangedSent(t, jobID, afterFirst, final, putsBefore, storedBefore)
	logf("real node 2: attempt 2 sent %d new or changed files, %d already verified files not re-sent", changed, len(final)-changed)
}
