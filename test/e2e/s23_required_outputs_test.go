package e2e

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 23: a job requires its final model and a config.json it never
// writes (tether.dev/require). The real sidecar uploads and verifies every
// file it wrote, the trainer exits 0 and the TrainJob completes, yet the
// binding fails RequiredOutputsMissing, naming the glob that matched
// nothing; the Warning Event says so too.
func TestScenario23RequiredOutputsMissing(t *testing.T) {
	shared(t)
	timed(t)
	ns := suite.newNamespace(t, "require")
	const name = "forgets-config"
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 4, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond})
	tj := bound(trainJob(name, ns)).Queue("user-queue").Annotation(names.RequireAnnotation, "model/*.safetensors, config.json").Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	suite.waitBinding(t, ns, name, 30*time.Second, "required outputs recorded", func(wb *tetherv1.WorkerBinding) error {
		if want := []string{"model/*.safetensors", "config.json"}; !reflect.DeepEqual(wb.Spec.Settings.Require, want) {
			return fmt.Errorf("spec.settings.require %q, want %q", wb.Spec.Settings.Require, want)
		}
		return nil
	})
	suite.injectedPod(t, ns, name, "")

	wb := suite.waitBinding(t, ns, name, 90*time.Second, "Failed/RequiredOutputsMissing",
		phaseIs(tetherv1.PhaseFailed, tetherv1.ReasonRequiredOutputsMissing))
	// Every file the trainer wrote was verified: only the requirement failed.
	if a := wb.Status.Artifacts; a == nil || !a.ManifestVerified || a.Files < 3 {
		t.Fatalf("artifacts %+v, want a verified manifest of the checkpoints and the model", a)
	}
	if code := wb.Status.TrainerExitCode; code == nil || *code != 0 {
		t.Errorf("trainerExitCode %v, want 0", code)
	}
	const unmatched = `"config.json" matched no verified file`
	if !strings.Contains(wb.Status.Message, unmatched) || strings.Contains(wb.Status.Message, `"model/*.safetensors"`) {
		t.Errorf("message %q, want it to name config.json only", wb.Status.Message)
	}
	if !meta.IsStatusConditionTrue(suite.getTrainJob(t, ns, name).Status.Conditions, "Complete") {
		t.Error("the binding failed before its TrainJob completed")
	}
	if _, ok := suite.stored(t, jobID)["model/final.safetensors"]; !ok {
		t.Error("the model the trainer wrote is not stored")
	}
	eventually(t, 20*time.Second, "a Warning RequiredOutputsMissing Event naming the glob", func() error {
		for _, ev := range suite.events(t, ns, name) {
			if ev.Reason == tetherv1.ReasonRequiredOutputsMissing && ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Note, unmatched) {
				return nil
			}
		}
		return fmt.Errorf("no such Event; reasons %v", suite.eventReasons(t, ns, name))
	})
	logf("scenario 23: %s", wb.Status.Message)
}
