package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 19: kube-apiserver is restarted mid-job (SIGTERM, then started
// again with the same flags, certificates and etcd, as a control-plane
// upgrade does). While it is away, the sidecar keeps heartbeating to the
// binding server and uploading to the store; status writes and leases
// fail and are retried; the leader replica, its lease not renewed, exits
// (controller-runtime's leader election) and is started again after the
// kubelet's back-off (localcluster's restartOnExit), its sidecars
// reconnecting to the other. Once it is back, the binding catches up: live,
// attempt 1, never HeartbeatLost (the sidecar never went silent), and the
// job ends Succeeded with every artifact verified. A second, short job ends
// while the apiserver is away (its sidecar's manifest stored, its verdict
// not writable until the sidecar is gone: the controller reads the stored
// manifest's verdict) and ends Succeeded too.
func TestScenario19APIServerRestarted(t *testing.T) {
	timed(t)
	suite.controlPlaneRestart(t, "kube-apiserver", suite.c.RestartAPIServer)
}

// controlPlaneRestart runs a job through a restart of one cluster
// component and reports what it cost.
func (e *env) controlPlaneRestart(t *testing.T, component string, restart func(context.Context, time.Duration) (time.Duration, error)) {
	ns := e.newNamespace(t, "restart")
	const name = "through-restart"
	// Long enough to outlast the restart (10-40s here, mostly the apiserver's
	// own start).
	jobID, pod := e.startRunning(t, ns, name, localcluster.TrainerPlan{Steps: 120, CheckpointEvery: 10, StepInterval: 500 * time.Millisecond, CheckpointBytes: 4 << 20})
	e.expectCheckpointDuringTraining(t, pod, jobID)

	// A second job ends while the component is away: its manifest is stored
	// but its verdict cannot be written then; it must still end Succeeded.
	const short = "ends-during-restart"
	setPlans(ns, short, localcluster.TrainerPlan{Steps: 12, CheckpointEvery: 4, StepInterval: 500 * time.Millisecond})
	shortTJ := bound(trainJob(short, ns)).Queue("user-queue").Obj()
	e.create(t, shortTJ)
	shortPod := e.injectedPod(t, ns, short, "")
	e.waitBinding(t, ns, short, 60*time.Second, "Running", phaseIs(tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating))

	before := e.s3Traffic(t)
	crashesBefore := e.tether.Crashes(0) + e.tether.Crashes(1)
	unavailable, err := restart(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	// The binding catches up: a heartbeat recorded after the restart.
	wb := e.waitBinding(t, ns, name, 60*time.Second, "a heartbeat recorded after the restart", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.LastHeartbeatTime == nil || wb.Status.LastHeartbeatTime.Time.Before(back.Truncate(time.Second)) {
			return fmt.Errorf("last heartbeat %v", wb.Status.LastHeartbeatTime)
		}
		return nil
	})
	caughtUp := time.Since(back)
	if wb.Status.Phase != tetherv1.PhaseRunning && wb.Status.Phase != tetherv1.PhaseFinishing {
		t.Errorf("after the restart: %s/%s, want the binding live", wb.Status.Phase, wb.Status.Reason)
	}
	if st := e.podNow(t, ns, shortPod.Name); st == nil || !trainerTerminated(st) {
		logf("scenario %s restart: the short job's trainer had not ended when the %s was back", component, component)
	}
	e.expectSucceededWithArtifacts(t, shortPod, short, shortTJ.Annotations[names.JobIDAnnotation])
	done, local := e.expectSucceededWithArtifacts(t, pod, name, jobID)
	if done.Status.Attempt != 1 {
		t.Errorf("attempt %d, want 1: a %s restart is no new attempt", done.Status.Attempt, component)
	}
	// The sidecar never went silent: no HeartbeatLost was ever said.
	if c := meta.FindStatusCondition(done.Status.Conditions, tetherv1.ConditionHeartbeatLost); c != nil && c.Reason != tetherv1.ReasonHeartbeating && c.Status == "True" {
		t.Errorf("HeartbeatLost %+v after a %s restart", c, component)
	}
	attempts := 0
	for _, r := range e.eventReasons(t, ns, name) {
		if r == tetherv1.ReasonHeartbeatLost {
			t.Errorf("%s Event after a %s restart: the sidecar heartbeat throughout", r, component)
		}
		if r == tetherv1.ReasonAttemptStarted {
			attempts++
		}
	}
	if attempts != 1 {
		t.Errorf("%d AttemptStarted Events, want 1 (the admission)", attempts)
	}
	cost := jobStoreCost(t, e.s3Traffic(t).Since(before), jobID, e.runner.ArtifactDir(pod))
	logf("scenario %s restart: unavailable %.1fs; binding caught up %.1fs after it was back; Succeeded %.1fs after; "+
		"%d Tether replica exits (restarted as the kubelet would); %d files; since the restart: %s",
		component, unavailable.Seconds(), caughtUp.Seconds(), time.Since(back).Seconds(),
		e.tether.Crashes(0)+e.tether.Crashes(1)-crashesBefore, len(local), cost)
}
