package binding

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/sidecar/session"
)

func TestRegisterHeartbeatProgressAndMetrics(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	if err := os.WriteFile(filepath.Join(j.artifactDir, binding.ProgressFile),
		[]byte(`{"step":10,"loss":1.5}`+"\n"+`{"step":120,"epoch":1.5,"loss":0.25,"fraction":0.4}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, _ := runningClient(t, j.clientConfig())
	wb := j.waitPhase(t, tetherv1.PhaseRunning, "")
	if wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(j.pod.UID) || wb.Status.Attempt != 1 {
		t.Errorf("worker %+v attempt %d, want pod %s attempt 1", wb.Status.Worker, wb.Status.Attempt, j.pod.UID)
	}
	eventually(t, 15*time.Second, func() error {
		wb = j.binding(t)
		if p := wb.Status.Progress; p == nil || p.Step == nil || *p.Step != 120 || p.Epoch != "1.5" || p.Loss != "0.25" {
			return errors.New("status.progress does not show step 120, epoch 1.5, loss 0.25 yet")
		}
		return nil
	})
	if c.LastAckedSeq() == 0 {
		t.Error("no heartbeat was acknowledged")
	}
	want := map[string]string{
		"tether_job_progress_step{" + jobLabel(j) + "}":         "120",
		"tether_job_progress_ratio{" + jobLabel(j) + "}":        "0.4",
		"tether_job_session_connected{" + nodeLabel(j, 0) + "}": "1",
		"tether_job_attempt{" + jobLabel(j) + "}":               "1",
	}
	lines := strings.Join(metrics(t, "tether_job_"), "\n")
	for series, v := range want {
		if !strings.Contains(lines, series+" "+v) {
			t.Errorf("metrics lack %s %s:\n%s", series, v, lines)
		}
	}
	if !strings.Contains(lines, fmt.Sprintf(`tether_job_phase{namespace="%s",phase="Running",trainjob="%s"} 1`, j.ns, j.name)) {
		t.Errorf("metrics lack the Running phase series:\n%s", lines)
	}
	if !strings.Contains(strings.Join(metrics(t, "tether_binding_heartbeat_rtt_seconds_count"), ""), "tether_binding_heartbeat_rtt_seconds_count") {
		t.Error("no heartbeat round-trip histogram")
	}
}

func TestCrossJobTokenIsRefusedOnEveryEndpoint(t *testing.T) {
	a := newJob(t, nil)
	b := newJob(t, nil)
	refusedBefore := counter(t, `tether_binding_refusals_total{reason="identity_mismatch"}`)

	// a's token with b's identity: registration and session are refused.
	cfg := b.clientConfig()
	cfg.TokenFile = a.tokenFile
	c, err := session.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Register(context.Background())
	var pe *session.PermanentError
	if !errors.As(err, &pe) || pe.StatusCode != http.StatusForbidden {
		t.Fatalf("register with another job's token: %v, want 403", err)
	}
	err = c.Run(context.Background())
	if !errors.As(err, &pe) || pe.StatusCode != http.StatusForbidden {
		t.Fatalf("session with another job's token: %v, want 403", err)
	}
	// a's token, a's ids, but b's pod.
	cfg = a.clientConfig()
	cfg.Pod = b.clientConfig().Pod
	c, _ = session.NewClient(cfg)
	if _, err := c.Register(context.Background()); !errors.As(err, &pe) || pe.StatusCode != http.StatusForbidden {
		t.Fatalf("register from another job's pod: %v, want 403", err)
	}
	if got := counter(t, `tether_binding_refusals_total{reason="identity_mismatch"}`); got < refusedBefore+2 {
		t.Errorf("identity_mismatch refusals %v → %v, want +2", refusedBefore, got)
	}
	// Neither binding moved.
	for _, j := range []*job{a, b} {
		if p := j.binding(t).Status.Phase; p != tetherv1.PhasePending {
			t.Errorf("%s phase %s after refused requests, want Pending", j.ns, p)
		}
	}
}

func TestCommandsAreDeliveredAndAcknowledged(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	var flushes atomic.Int32
	cfg := j.clientConfig()
	cfg.OnCommand = func(_ context.Context, cmd binding.Command) error {
		if cmd.Name == binding.CommandFlush {
			flushes.Add(1)
		}
		return nil
	}
	_, _, done := runningClient(t, cfg)
	j.waitPhase(t, tetherv1.PhaseRunning, "")

	command(t, j, "flush:1")
	eventually(t, 10*time.Second, func() error {
		c := j.binding(t).Status.LastCommand
		if c == nil || c.ID != "1" || c.State != tetherv1.CommandAcknowledged {
			return fmt.Errorf("flush:1 not acknowledged yet: %+v annotations %v", c, j.binding(t).Annotations)
		}
		return nil
	})
	if flushes.Load() != 1 {
		t.Errorf("worker ran flush %d times, want 1", flushes.Load())
	}

	// An acknowledged cancel alone ends nothing: the trainer pod remains
	// until the orchestrator stops the job; Cancelled once it is gone.
	command(t, j, "cancel:2")
	wb := j.waitPhase(t, tetherv1.PhaseFinishing, tetherv1.ReasonCancelling)
	if wb.Status.LastCommand.State != tetherv1.CommandAcknowledged {
		t.Errorf("cancel command state %s", wb.Status.LastCommand.State)
	}
	if err := env.Client.Delete(context.Background(), j.pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	j.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonCancelled)
	// A finished binding ends the session for good.
	select {
	case err := <-done:
		var pe *session.PermanentError
		if !errors.As(err, &pe) || pe.CloseCode != binding.CloseFinished {
			t.Errorf("client ended with %v, want close %d", err, binding.CloseFinished)
		}
	case <-time.After(10 * time.Second):
		t.Error("client still running after its binding finished")
	}
}

// TestTenantCannotTakeTheSidecarsSession: anyone holding the job's token
// (a tenant can read its Secret) opens a session as the sidecar's pod, while
// the real sidecar's session heartbeats. The newcomer is refused (409
// SessionActive, counted, a Warning Event); the real session goes on, where
// it used to be closed with 4001 and the sidecar stopped its work.
func TestTenantCannotTakeTheSidecarsSession(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	sidecar, _, realDone := runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	const refused = `tether_binding_refusals_total{reason="session_active"}`
	before := counter(t, refused)
	intruder, _, _ := runningClient(t, j.clientConfig())
	eventually(t, 10*time.Second, func() error {
		select {
		case err := <-realDone:
			t.Fatalf("the real sidecar's session ended when another opened one with its token: %v", err)
		default:
		}
		if counter(t, refused) <= before {
			return errors.New("the second session open was not refused yet")
		}
		return nil
	})
	seq := sidecar.LastAckedSeq()
	eventually(t, 10*time.Second, func() error {
		if sidecar.LastAckedSeq() < seq+2 {
			return fmt.Errorf("real sidecar acked up to %d, want %d", sidecar.LastAckedSeq(), seq+2)
		}
		return nil
	})
	select {
	case err := <-realDone:
		t.Fatalf("the real sidecar's session ended: %v", err)
	default:
	}
	if intruder.LastAckedSeq() != 0 {
		t.Errorf("the intruder's heartbeats were acknowledged (seq %d)", intruder.LastAckedSeq())
	}
	waitForEvent(t, j, bindingserver.ReasonSessionRefused)
}

func TestHeartbeatLostThenRecovered(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	_, stop, done := runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	stop()
	<-done
	// The session ended; with no worker for 3 × 1 s the heartbeat is lost.
	eventually(t, 15*time.Second, func() error {
		wb := j.binding(t)
		if !meta.IsStatusConditionTrue(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost) || wb.Status.Reason != tetherv1.ReasonHeartbeatLost {
			return errors.New("HeartbeatLost not set")
		}
		return nil
	})
	waitForEvent(t, j, tetherv1.ReasonHeartbeatLost)
	runningClient(t, j.clientConfig())
	eventually(t, 15*time.Second, func() error {
		wb := j.binding(t)
		c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost)
		if c == nil || c.Status != metav1.ConditionFalse || wb.Status.Phase != tetherv1.PhaseRunning {
			return errors.New("HeartbeatLost not cleared")
		}
		return nil
	})
}

func TestTrainerExitCodeFromPodStatus(t *testing.T) {
	for _, tc := range []struct {
		code   int32
		phase  tetherv1.WorkerBindingPhase
		reason string
	}{
		// The TrainJob's Complete alone does not succeed the job: without
		// a verified artifact manifest it ends ArtifactsIncomplete (the
		// artifact tests cover the Succeeded path with real uploads).
		{0, tetherv1.PhaseFailed, tetherv1.ReasonArtifactsIncomplete},
		{3, tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed},
	} {
		j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
		_, _, done := runningClient(t, j.clientConfig())
		j.waitPhase(t, tetherv1.PhaseRunning, "")
		finishTrainer(t, j, tc.code)
		// No exit is a verdict: the binding records it and stays live.
		eventually(t, 15*time.Second, func() error {
			wb := j.binding(t)
			if wb.Status.TrainerExits != 1 || wb.Status.Phase != tetherv1.PhaseRunning {
				return fmt.Errorf("after the exit: %s/%s, %d exits recorded; want Running with 1", wb.Status.Phase, wb.Status.Reason, wb.Status.TrainerExits)
			}
			return nil
		})
		if tc.code == 0 {
			endPod(t, j)
			setTrainJobCondition(t, j, "Complete", "jobset completed")
		} else {
			setTrainJobCondition(t, j, "Failed", "jobset failed: BackoffLimitExceeded")
		}
		wb := j.waitPhase(t, tc.phase, tc.reason)
		if wb.Status.TrainerExitCode == nil || *wb.Status.TrainerExitCode != tc.code {
			t.Errorf("exit code %v, want %d", wb.Status.TrainerExitCode, tc.code)
		}
		if tc.code == 0 && !strings.Contains(wb.Status.Message, "no manifest") {
			t.Errorf("ArtifactsIncomplete message %q does not say what is missing", wb.Status.Message)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("exit %d: client still running after the binding finished", tc.code)
		}
		// The job's per-job series disappear once its binding ended.
		eventually(t, 10*time.Second, func() error {
			if lines := metrics(t, fmt.Sprintf("tether_job_session_connected{namespace=%q,", j.ns)); len(lines) != 0 {
				return errors.New("per-job series still exported: " + strings.Join(lines, "; "))
			}
			return nil
		})
	}
}

func TestServerRestartResumesWithoutRegression(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	c, _, _ := runningClient(t, j.clientConfig())
	before := j.waitPhase(t, tetherv1.PhaseRunning, "")
	seq := c.LastAckedSeq()
	if err := env.RestartControlPlane(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if c.LastAckedSeq() <= seq+2 {
			return errors.New("no new heartbeats acknowledged after the restart")
		}
		return nil
	})
	after := j.binding(t)
	if after.Status.Phase != tetherv1.PhaseRunning || after.Status.Attempt != before.Status.Attempt ||
		after.Status.Worker.RegisteredTime != before.Status.Worker.RegisteredTime {
		t.Errorf("after restart: phase %s attempt %d registered %v; before: attempt %d registered %v",
			after.Status.Phase, after.Status.Attempt, after.Status.Worker.RegisteredTime, before.Status.Attempt, before.Status.Worker.RegisteredTime)
	}
	if c.Reconnects() < 1 {
		t.Error("client did not reconnect")
	}
}

func command(t *testing.T, j *job, value string) {
	t.Helper()
	wb := j.binding(t)
	patch := client.MergeFrom(wb.DeepCopy())
	if wb.Annotations == nil {
		wb.Annotations = map[string]string{}
	}
	wb.Annotations[names.CommandAnnotation] = value
	if err := env.Client.Patch(context.Background(), wb, patch); err != nil {
		t.Fatal(err)
	}
}

// finishTrainer writes the trainer container's termination into the pod's
// status as the kubelet would (no kubelet runs here).
func finishTrainer(t *testing.T, j *job, code int32) {
	t.Helper()
	j.pod.Status.Phase = corev1.PodRunning
	j.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed", FinishedAt: metav1.Now()}}}}
	if err := env.Client.Status().Update(context.Background(), j.pod); err != nil {
		t.Fatal(err)
	}
}

// setTrainJobCondition sets a TrainJob condition True, as Trainer copies
// JobSet's Complete or Failed (no Trainer runs here).
func setTrainJobCondition(t *testing.T, j *job, typ, msg string) {
	t.Helper()
	ctx := context.Background()
	tj := &trainer.TrainJob{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: j.name}, tj); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ, Message: msg})
	if err := env.Client.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
}

// endPod marks the pod Succeeded, as the kubelet does once every container,
// the native sidecar included, has stopped.
func endPod(t *testing.T, j *job) {
	t.Helper()
	j.pod.Status.Phase = corev1.PodSucceeded
	if err := env.Client.Status().Update(context.Background(), j.pod); err != nil {
		t.Fatal(err)
	}
}
