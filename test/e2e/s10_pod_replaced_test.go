package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 10: restartPolicy Never (a runtime with backoffLimit 2): the
// trainer fails, the Job replaces its pod with a new pod of the same
// completion index, injected again; its sidecar registers as node 0 in
// attempt 2 (PodReplaced), resumes from the files kept on the node's volume
// without sending the verified ones again, and the job succeeds.
//
// Stand-in: kwok runs no containers; PodRunner runs the real sidecar binary
// and the trainer stand-in as local processes for each pod.
func TestScenario10PodReplaced(t *testing.T) {
	shared(t)
	timed(t)
	ns := suite.newNamespace(t, "replaced")
	const name = "replaced"
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 8, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond,
		ExitCode: 1, FailPods: 1, Resume: true, FailAfterSteps: 4})
	tj := bound(trainJob(name, ns)).Queue("user-queue").Obj()
	tj.Spec.RuntimeRef.Name = localcluster.RuntimeNever
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]

	first := suite.injectedPod(t, ns, name, "")
	if first.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("pod restartPolicy %s, want Never from the runtime", first.Spec.RestartPolicy)
	}
	suite.waitBinding(t, ns, name, 60*time.Second, "attempt 1 running", phaseIs(tetherv1.PhaseRunning, ""))
	var afterFirst map[string]string
	eventually(t, 60*time.Second, "the first pod failed", func() error {
		p := suite.podNow(t, ns, first.Name)
		if p == nil || p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("first pod not Failed yet")
		}
		return nil
	})
	afterFirst = localFiles(t, suite.runner.ArtifactDir(first))
	storedBefore := suite.lastModified(t, jobID)

	second := suite.injectedPod(t, ns, name, first.UID)
	wb := suite.waitBinding(t, ns, name, 60*time.Second, "attempt 2 started by the replacement", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Attempt != 2 || wb.Status.AttemptStartedBy != tetherv1.AttemptPodReplaced || wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(second.UID) {
			return fmt.Errorf("attempt %d by %q, worker %+v", wb.Status.Attempt, wb.Status.AttemptStartedBy, wb.Status.Worker)
		}
		return nil
	})
	if wb.Status.Phase == tetherv1.PhaseFailed {
		t.Fatalf("the first pod's failure failed the binding: %s", wb.Status.Message)
	}
	wb, final := suite.expectSucceededWithArtifacts(t, second, name, jobID)
	if wb.Status.TrainerExits != 2 || wb.Status.LastTrainerExit == nil || wb.Status.LastTrainerExit.ExitCode != 0 || wb.Status.LastTrainerExit.PodName != second.Name {
		t.Errorf("exits: %d, last %+v; want 2, the last exit 0 of %s", wb.Status.TrainerExits, wb.Status.LastTrainerExit, second.Name)
	}
	// Files the first pod had verified are not sent again.
	after := suite.lastModified(t, jobID)
	resent := 0
	for rel, sum := range afterFirst {
		if strings.HasPrefix(rel, "checkpoints/") && final[rel] == sum && !after[rel].Equal(storedBefore[rel]) && !storedBefore[rel].IsZero() {
			resent++
			t.Errorf("%s, verified by the first pod and unchanged, was stored again", rel)
		}
	}
	eventually(t, 20*time.Second, "Events", func() error {
		return hasAll(suite.eventReasons(t, ns, name), tetherv1.ReasonTrainerExited, tetherv1.ReasonAttemptStarted, tetherv1.ReasonTrainerSucceeded)
	})
	// The attempt's Event names the pod the replacement took the node from.
	replacedNamed := false
	for _, e := range suite.events(t, ns, name) {
		if e.Reason == tetherv1.ReasonAttemptStarted && strings.Contains(e.Note, "in place of pod "+first.Name) {
			replacedNamed = true
		}
	}
	if !replacedNamed {
		t.Errorf("no AttemptStarted Event names the replaced pod %s", first.Name)
	}
	logf("scenario 10: pod %s failed, %s succeeded in attempt %d; %d files, %d re-sent", first.Name, second.Name, wb.Status.Attempt, len(final), resent)
}
