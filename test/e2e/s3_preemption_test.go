package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// perNode asks for cpu per node; two of scenario 3's jobs (7 CPUs each) do
// not fit cluster-queue's 12 CPUs together.
func perNode(w *testobj.TrainJobWrapper, cpu string) *testobj.TrainJobWrapper {
	w.Spec.Trainer = &trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
	}}
	return w
}

// Scenario 3: a higher-priority workload preempts a bound TrainJob mid-
// training. Kueue suspends it, its pod is deleted: the trainer and then the
// sidecar get SIGTERM, the sidecar flushes the finished checkpoints, and the
// binding is Preempted. Re-admitted, a new pod registers on the same
// binding (attempt 2), does not send verified files again, and succeeds.
func TestScenario3Preemption(t *testing.T) {
	timed(t)
	ns := suite.newNamespace(t, "preempt")
	const name, rival = "low-prio", "high-prio"
	setPlans(ns, name,
		localcluster.TrainerPlan{Steps: 200, CheckpointEvery: 3, StepInterval: 400 * time.Millisecond},
		localcluster.TrainerPlan{Steps: 6, CheckpointEvery: 2, StepInterval: 400 * time.Millisecond, StartStep: 1000})
	low := perNode(bound(trainJob(name, ns)).Queue("user-queue").Label("kueue.x-k8s.io/priority-class", "low"), "7").Obj()
	suite.create(t, low)
	jobID := low.Annotations[names.JobIDAnnotation]
	first := suite.injectedPod(t, ns, name, "")
	dir := suite.runner.ArtifactDir(first)
	wb := suite.waitBinding(t, ns, name, 60*time.Second, "Running", phaseIs(tetherv1.PhaseRunning, ""))
	bindingUID := wb.UID
	eventually(t, 60*time.Second, "two checkpoints verified", func() error {
		n := 0
		stored := suite.stored(t, jobID)
		for rel, sum := range localFiles(t, dir) {
			if len(rel) > 12 && rel[:12] == "checkpoints/" && stored[rel] == sum {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d verified", n)
		}
		return nil
	})

	// The rival needs the quota: Kueue preempts the bound job.
	suite.create(t, perNode(trainJob(rival, ns).Queue("user-queue").Label("kueue.x-k8s.io/priority-class", "high"), "7").Obj())
	suite.waitBinding(t, ns, name, 60*time.Second, "Preempted", phaseIs(tetherv1.PhasePending, tetherv1.ReasonPreempted))
	if !ptr.Deref(suite.getTrainJob(t, ns, name).Spec.Suspend, false) {
		t.Error("the preempted TrainJob is not suspended")
	}
	eventually(t, 60*time.Second, "the preempted pod gone (sidecar flushed and exited)", func() error {
		if suite.podNow(t, ns, first.Name) != nil {
			return fmt.Errorf("pod %s still exists", first.Name)
		}
		return nil
	})
	// Every file the trainer had finished is stored, verified (a file
	// uploaded again waits under its pending key until the job succeeds).
	afterFirst := localFiles(t, dir)
	if err := sameFiles(afterFirst, suite.storedLatest(t, jobID)); err != nil {
		t.Fatalf("after preemption, not every finished file was flushed: %v", err)
	}
	eventually(t, 20*time.Second, "Preempted Event", func() error { return hasAll(suite.eventReasons(t, ns, name), "Preempted") })
	putsBefore, _ := suite.metricValue(t, "tether_artifacts_verified_files_total")
	storedBefore := suite.lastModified(t, jobID)
	logf("attempt 1 preempted with %d files stored", len(afterFirst))

	// The rival leaves; the job is admitted again and resumes in a new pod.
	if err := suite.c.Client.Delete(context.Background(), suite.getTrainJob(t, ns, rival)); err != nil {
		t.Fatal(err)
	}
	second := suite.injectedPod(t, ns, name, first.UID)
	wb = suite.waitBinding(t, ns, name, 90*time.Second, "Succeeded on attempt 2", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	if wb.UID != bindingUID || wb.Status.Attempt != 2 || wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(second.UID) {
		t.Fatalf("binding uid %s attempt %d worker %+v; want the same binding %s, attempt 2, pod %s",
			wb.UID, wb.Status.Attempt, wb.Status.Worker, bindingUID, second.UID)
	}
	final := localFiles(t, dir)
	if err := sameFiles(final, suite.stored(t, jobID)); err != nil {
		t.Fatalf("after attempt 2: %v", err)
	}
	// Only what attempt 2 wrote or changed was sent, plus the manifest.
	changed := suite.expectOnlyChangedSent(t, jobID, afterFirst, final, putsBefore, storedBefore)
	logf("attempt 2: %d new or changed files sent, %d already verified files skipped", changed, len(final)-changed)
}
