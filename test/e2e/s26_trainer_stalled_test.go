package e2e

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 26: a trainer that stops stepping while its sidecar heartbeats
// (the stand-in stands still after step 4, as a hung collective would) is
// TrainerStalled once its step stood still for the job's stall window:
// the binding's Progressing condition, a Warning Event, the
// tether_job_stalled gauge. When its steps resume, all three say so by
// themselves, and the job succeeds. Meanwhile the checkpoint of step 4,
// verified, is the binding's lastCheckpoint.
func TestScenario26TrainerStalled(t *testing.T) {
	shared(t)
	timed(t)
	ns := suite.newNamespace(t, "stalled")
	const name = "stalled-finetune"
	// The stall lasts 100 s against the shortest window a TrainJob can set
	// (1m): long enough that the controller, asked back at the window's
	// end, declares it well before the steps resume.
	// The stand-in writes each checkpoint as one file, checkpoints/step-NNNN.pt:
	// a layout the sidecar is told (the default finds directories).
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 8, CheckpointEvery: 2, StepInterval: time.Second, StallAtStep: 4, StallFor: 100 * time.Second,
		SidecarEnv: []string{binding.EnvCheckpointPattern + "=checkpoints/step-{step}.pt"}})
	tj := bound(trainJob(name, ns)).Annotation(names.StallAfterAnnotation, "1m").Queue("user-queue").Obj()
	suite.create(t, tj)

	var stepAt metav1.Time
	suite.waitBinding(t, ns, name, 90*time.Second, "running at step 4, the time of the step recorded", func(wb *tetherv1.WorkerBinding) error {
		p := wb.Status.Progress
		if wb.Status.Phase != tetherv1.PhaseRunning || p == nil || p.Step == nil || *p.Step < 4 || p.LastStepTime == nil {
			return fmt.Errorf("phase %s/%s, progress %+v", wb.Status.Phase, wb.Status.Reason, p)
		}
		if wb.Spec.Settings.StallAfter == nil || wb.Spec.Settings.StallAfter.Duration != time.Minute {
			return fmt.Errorf("spec.settings.stallAfter %v, want 1m", wb.Spec.Settings.StallAfter)
		}
		stepAt = *p.LastStepTime
		return nil
	})
	wb := suite.waitBinding(t, ns, name, 3*time.Minute, "Progressing=False/TrainerStalled", func(wb *tetherv1.WorkerBinding) error {
		c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionProgressing)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != tetherv1.ReasonTrainerStalled {
			return fmt.Errorf("Progressing %+v (phase %s/%s)", c, wb.Status.Phase, wb.Status.Reason)
		}
		return nil
	})
	c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionProgressing)
	if stood := c.LastTransitionTime.Sub(stepAt.Time); stood < time.Minute {
		t.Errorf("stalled %s after the last step, before the 1m window: %+v", stood, c)
	}
	if wb.Status.Phase != tetherv1.PhaseRunning || wb.Status.Reason != tetherv1.ReasonHeartbeating {
		t.Errorf("a stalled job's phase %s/%s, want Running/Heartbeating (its sidecar is fine)", wb.Status.Phase, wb.Status.Reason)
	}
	// The checkpoint of step 4 was written before the stall: verified, it is
	// the job's last checkpoint while the trainer stands still.
	wb = suite.waitBinding(t, ns, name, 30*time.Second, "lastCheckpoint at step 4", func(wb *tetherv1.WorkerBinding) error {
		if c := wb.Status.LastCheckpoint; c == nil || c.Step != 4 || c.Path != "checkpoints/step-0004.pt" || c.Files != 1 || c.Bytes != 256<<10 {
			return fmt.Errorf("lastCheckpoint %+v", c)
		}
		return nil
	})
	eventually(t, 20*time.Second, "TrainerStalled Event and gauges", func() error {
		if v, ok := suite.metricValue(t, "tether_job_last_checkpoint_timestamp_seconds", jobLabels(ns, name)...); !ok || int64(v) != wb.Status.LastCheckpoint.Time.Unix() {
			return fmt.Errorf("tether_job_last_checkpoint_timestamp_seconds=%v (present %v), want %d", v, ok, wb.Status.LastCheckpoint.Time.Unix())
		}
		if err := hasAll(suite.eventReasons(t, ns, name), tetherv1.ReasonTrainerStalled); err != nil {
			return err
		}
		if v, ok := suite.metricValue(t, "tether_job_stalled", jobLabels(ns, name)...); !ok || v != 1 {
			return fmt.Errorf("tether_job_stalled=%v (present %v)", v, ok)
		}
		return nil
	})

	suite.waitBinding(t, ns, name, 2*time.Minute, "Progressing again once the steps resume", func(wb *tetherv1.WorkerBinding) error {
		c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionProgressing)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Progressing %+v (step %v)", c, wb.Status.Progress)
		}
		return nil
	})
	eventually(t, 20*time.Second, "the gauge back to 0", func() error {
		if v, ok := suite.metricValue(t, "tether_job_stalled", jobLabels(ns, name)...); ok && v != 0 {
			return fmt.Errorf("tether_job_stalled=%v", v)
		}
		return nil
	})
	suite.waitBinding(t, ns, name, 2*time.Minute, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
}
