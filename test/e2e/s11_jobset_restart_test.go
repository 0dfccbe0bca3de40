package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 11: a JobSet failurePolicy (maxRestarts 1): the trainer's Job
// fails, JobSet recreates every Job and pod (restart-attempt 1); the new
// pod's sidecar starts attempt 2 (JobSetRestart) and the job succeeds.
// Stand-in: PodRunner runs the processes of each pod (kwok).
func TestScenario11JobSetRestart(t *testing.T) {
	shared(t)
	timed(t)
	ns := suite.newNamespace(t, "jsrestart")
	const name = "restarts"
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 6, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond, ExitCode: 1, FailPods: 1})
	tj := bound(trainJob(name, ns)).Queue("user-queue").Obj()
	tj.Spec.RuntimeRef.Name = localcluster.RuntimeJobSetRestart
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]

	first := suite.injectedPod(t, ns, name, "")
	suite.waitBinding(t, ns, name, 60*time.Second, "attempt 1 running", phaseIs(tetherv1.PhaseRunning, ""))
	var second *corev1.Pod
	eventually(t, 90*time.Second, "a pod of JobSet restart attempt 1", func() error {
		for _, p := range suite.trainerPods(t, ns, name) {
			if p.UID != first.UID && trainjob.RestartAttempt(&p) == 1 && p.DeletionTimestamp == nil {
				second = p.DeepCopy()
				return nil
			}
		}
		return fmt.Errorf("no restarted pod yet")
	})
	wb := suite.waitBinding(t, ns, name, 60*time.Second, "attempt 2 started by the JobSet restart", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Attempt != 2 || wb.Status.AttemptStartedBy != tetherv1.AttemptJobSetRestart || wb.Status.JobSetRestartAttempt != 1 {
			return fmt.Errorf("attempt %d by %q, JobSet restart attempt %d", wb.Status.Attempt, wb.Status.AttemptStartedBy, wb.Status.JobSetRestartAttempt)
		}
		return nil
	})
	if wb.Status.Phase == tetherv1.PhaseFailed {
		t.Fatalf("the first Job's failure failed the binding: %s", wb.Status.Message)
	}
	wb, files := suite.expectSucceededWithArtifacts(t, second, name, jobID)
	if wb.Status.TrainerExits < 2 || wb.Status.Attempt != 2 {
		t.Errorf("%d exits, attempt %d; want at least 2 exits in 2 attempts", wb.Status.TrainerExits, wb.Status.Attempt)
	}
	logf("scenario 11: pod %s (restart attempt 0) failed, %s (restart attempt 1) succeeded; %d files", first.Name, second.Name, len(files))
}
