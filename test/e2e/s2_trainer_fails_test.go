package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 2: the trainer exits 1 after a crash while re-saving its first
// checkpoint left it half-written. The binding fails as TrainerFailed with the exit
// code; the checkpoint verified earlier is still the stored one.
func TestScenario2TrainerFails(t *testing.T) {
	shared(t)
	timed(t)
	ns := suite.newNamespace(t, "fails")
	const name = "diverges"
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 10, CheckpointEvery: 3, StepInterval: 700 * time.Millisecond,
		ExitCode: 1, CorruptFirstCheckpoint: true})
	tj := bound(trainJob(name, ns)).Queue("user-queue").Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	pod := suite.injectedPod(t, ns, name, "")
	dir := suite.runner.ArtifactDir(pod)

	// The first checkpoint (step 3) is verified while the trainer still runs.
	const last = "checkpoints/step-0003.pt"
	var good string
	eventually(t, 60*time.Second, last+" verified during training", func() error {
		good = suite.stored(t, jobID)[last]
		if good == "" || localFiles(t, dir)[last] != good {
			return fmt.Errorf("not stored yet")
		}
		return nil
	})

	wb := suite.waitBinding(t, ns, name, 60*time.Second, "Failed/TrainerFailed", phaseIs(tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed))
	if code := ptr.Deref(wb.Status.TrainerExitCode, -1); code != 1 {
		t.Fatalf("trainerExitCode %d, want 1", code)
	}
	if !strings.Contains(wb.Status.Message, "1") {
		t.Errorf("message %q does not name the exit code", wb.Status.Message)
	}
	// The crash left a different, partial file; the store kept the good one.
	local := localFiles(t, dir)[last]
	if local == good {
		t.Fatal("the stand-in did not corrupt the checkpoint: the test would prove nothing")
	}
	eventually(t, 30*time.Second, "no pending object left, good checkpoint kept", func() error {
		keys := suite.lastModified(t, jobID)
		for k := range keys {
			if strings.Contains(k, "/.tether/pending/") {
				return fmt.Errorf("pending object %s still stored", k)
			}
		}
		if got := suite.stored(t, jobID)[last]; got != good {
			return fmt.Errorf("%s: stored etag %s, want the verified %s (the partial file's md5 is %s)", last, got, good, local)
		}
		return nil
	})
	if _, ok := suite.stored(t, jobID)["model/final.safetensors"]; ok {
		t.Error("a final model was stored for a failed trainer")
	}
	eventually(t, 60*time.Second, "TrainJob Failed", func() error {
		if !meta.IsStatusConditionTrue(suite.getTrainJob(t, ns, name).Status.Conditions, "Failed") {
			return fmt.Errorf("not Failed")
		}
		return nil
	})
	eventually(t, 20*time.Second, "Events and /metrics", func() error {
		if err := hasAll(suite.eventReasons(t, ns, name), "Injected", "Registered", "TrainerFailed"); err != nil {
			return err
		}
		if v, ok := suite.metricValue(t, "tether_job_phase", append(jobLabels(ns, name), `phase="Failed"`)...); !ok || v != 1 {
			return fmt.Errorf("tether_job_phase{phase=Failed}=%v", v)
		}
		return nil
	})
}
