package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real node, scenario 7: the trainer fails once and the kubelet restarts it
// in place (restartPolicy OnFailure, JobSet's default on Trainer's own
// torch-distributed runtime, whose Job keeps the default backoffLimit). The
// exit is recorded and announced, but is no verdict: the binding stays
// live, the same sidecar keeps syncing across the restart, attempt 2 starts
// (TrainerRestarted), the second run succeeds, and the binding succeeds with
// what the second run left, stored.
func TestRealNode7TrainerRestartedInPlace(t *testing.T) {
	shared(t)
	needRealNode(t)
	timed(t)
	ns := suite.realNodeNamespace(t, "real-restart")
	const name = "real-flaky"
	// The first run trains 12 steps (checkpoints at 4, 8, 12) and exits 3;
	// the restarted one resumes after checkpoint 12 from the same emptyDir
	// and trains to step 20. .standin-runs is the stand-in's run counter.
	plan := localcluster.TrainerPlan{Steps: 20, CheckpointEvery: 4, StepInterval: time.Second, ExitCode: 3, FailRuns: 1, FailAfterSteps: 12, Resume: true}
	tj := bound(realTrainJob(name, ns, plan)).Annotation(names.ExcludeAnnotation, ".standin-runs").Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]

	pod := suite.waitRunningOnRealNode(t, suite.injectedPod(t, ns, name, ""))
	wb := suite.waitBinding(t, ns, name, 60*time.Second, "registered and heartbeating", phaseIs(tetherv1.PhaseRunning, ""))
	if wb.Status.Attempt != 1 || wb.Status.AttemptStartedBy != tetherv1.AttemptAdmission {
		t.Fatalf("attempt %d started by %q, want 1 by Admission", wb.Status.Attempt, wb.Status.AttemptStartedBy)
	}
	sidecarStart := containerStatus(pod, mutate.SidecarName).State.Running.StartedAt

	// The first run exits 3; the kubelet restarts the trainer in the same pod.
	pod = suite.waitPod(t, ns, pod.Name, 120*time.Second, "the trainer restarted in place", func(p *corev1.Pod) error {
		if s := containerStatus(p, "node"); s == nil || s.RestartCount < 1 || s.LastTerminationState.Terminated == nil {
			return fmt.Errorf("trainer not restarted yet: %+v", s)
		}
		return nil
	})
	last := containerStatus(pod, "node").LastTerminationState.Terminated
	if last.ExitCode != 3 {
		t.Fatalf("the first run exited %d, want 3", last.ExitCode)
	}
	// The second run is short (8 steps): by the time this looks, the job
	// may be complete and the binding Finishing or Succeeded. What matters
	// is that the exit was no verdict: the binding never failed.
	suite.waitBinding(t, ns, name, 30*time.Second, "attempt 2, started by the restart, binding not failed", func(wb *tetherv1.WorkerBinding) error {
		switch {
		case wb.Status.Attempt != 2 || wb.Status.AttemptStartedBy != tetherv1.AttemptTrainerRestarted:
			return fmt.Errorf("attempt %d by %q", wb.Status.Attempt, wb.Status.AttemptStartedBy)
		case wb.Status.Phase == tetherv1.PhaseFailed || wb.Status.Phase == tetherv1.PhasePending:
			return fmt.Errorf("phase %s/%s: a trainer restarted in place must keep its binding live", wb.Status.Phase, wb.Status.Reason)
		case wb.Status.TrainerExits == 1 && (wb.Status.LastTrainerExit == nil || wb.Status.LastTrainerExit.ExitCode != 3 || !wb.Status.LastTrainerExit.Restarted):
			return fmt.Errorf("last trainer exit %+v, want the first run's code 3, restarted", wb.Status.LastTrainerExit)
		case wb.Status.TrainerExits < 1:
			return fmt.Errorf("no trainer exit recorded")
		case len(wb.Status.Nodes) != 1 || wb.Status.Nodes[0].Restarts != 1:
			return fmt.Errorf("nodes %+v", wb.Status.Nodes)
		}
		return nil
	})
	eventually(t, 20*time.Second, "the exit and the restart announced", func() error {
		var exited, restarted bool
		for _, e := range suite.events(t, ns, name) {
			exited = exited || e.Reason == tetherv1.ReasonTrainerExited && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "exited with code 3")
			restarted = restarted || e.Reason == tetherv1.ReasonAttemptStarted && strings.Contains(e.Note, "attempt 2 started: TrainerRestarted") &&
				strings.Contains(e.Note, "restarted the trainer in place (restart 1)")
		}
		if !exited || !restarted {
			return fmt.Errorf("Warning TrainerExited with code 3: %v, AttemptStarted for the restart: %v (%v)", exited, restarted, suite.eventReasons(t, ns, name))
		}
		return nil
	})

	// The same sidecar (never restarted) finishes the job: Succeeded.
	wb = suite.waitBinding(t, ns, name, 180*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	if ptr.Deref(wb.Status.TrainerExitCode, -1) != 0 || wb.Status.TrainerExits != 2 || wb.Status.Attempt != 2 {
		t.Errorf("final: exit %v, %d exits, attempt %d; want exit 0, 2 exits, attempt 2", wb.Status.TrainerExitCode, wb.Status.TrainerExits, wb.Status.Attempt)
	}
	pod = suite.waitPod(t, ns, pod.Name, 60*time.Second, "pod Succeeded", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	sc := containerStatus(pod, mutate.SidecarName)
	if sc.RestartCount != 0 || sc.State.Terminated == nil || !sc.State.Terminated.StartedAt.Equal(&sidecarStart) {
		t.Errorf("the sidecar was restarted (%d restarts, started %v, first started %v): it must outlive the trainer's restart",
			sc.RestartCount, sc.State.Terminated, sidecarStart)
	}
	// The second run's closing list (its log) is what is stored: the first
	// run's checkpoints, verified during it, and the second run's.
	files := suite.expectStoredAsTrainerLeft(t, pod, jobID)
	for _, want := range []string{"checkpoints/step-0004.pt", "checkpoints/step-0012.pt", "checkpoints/step-0020.pt", "model/final.safetensors"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the trainer left no %s (%v)", want, files)
		}
	}
	if _, ok := suite.stored(t, jobID)[".standin-runs"]; ok {
		t.Error("the excluded run counter was stored")
	}
	// Each run's log is archived: the first (read through pods/log with
	// previous=true once the restart shows; never at its exit, when the
	// kubelet may already run the second) and the second. The kubelet has
	// garbage-collected the first run's container by now.
	for key, want := range map[string]string{
		upload.LogKey(jobID, pod.Name):           "failing with exit code 3",
		upload.RestartLogKey(jobID, pod.Name, 1): "final model written",
	} {
		eventually(t, 60*time.Second, "archived log "+key, func() error {
			body, _, err := suite.tether.S3.Get(context.Background(), key)
			if err != nil {
				return err
			}
			if !strings.Contains(string(body), want) {
				return fmt.Errorf("%s lacks %q: %q", key, want, body)
			}
			return nil
		})
	}
	logf("real node 7: first run exited %d at %s, restarted %s later; %d files stored", last.ExitCode,
		last.FinishedAt.Format(time.RFC3339), containerStatus(pod, "node").State.Terminated.StartedAt.Sub(last.FinishedAt.Time), len(files))
}
