package e2e

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 5: the sidecar is paused (SIGSTOP): the binding reports
// HeartbeatLost; resumed (SIGCONT), heartbeats clear it and the job succeeds.
func TestScenario5HeartbeatLost(t *testing.T) {
	shared(t)
	timed(t)
	ns := suite.newNamespace(t, "hblost")
	const name = "stalls"
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 30, CheckpointEvery: 10, StepInterval: 600 * time.Millisecond})
	suite.create(t, bound(trainJob(name, ns)).Queue("user-queue").Obj())
	pod := suite.injectedPod(t, ns, name, "")
	suite.waitBinding(t, ns, name, 60*time.Second, "Running", phaseIs(tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating))

	perMinute := suite.steadyWrites(t, ns, name, 8*time.Second)
	logf("scenario 5: one node, %.1f status writes/min while heartbeating", perMinute)
	resume := suite.pauseSidecar(t, pod.UID)
	stopped := time.Now()
	wb := suite.waitBinding(t, ns, name, 30*time.Second, "HeartbeatLost", func(wb *tetherv1.WorkerBinding) error {
		c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost)
		if c == nil || c.Status != "True" || wb.Status.Reason != tetherv1.ReasonHeartbeatLost {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	logf("HeartbeatLost %.1fs after SIGSTOP (1s interval, 3 missed): %s", time.Since(stopped).Seconds(), wb.Status.Message)
	eventually(t, 10*time.Second, "stale heartbeat age in /metrics", func() error {
		// The session may already be closed (its read deadline passed), then
		// the series is gone from the replica that held it; the phase stays.
		if v, ok := suite.metricValue(t, "tether_job_heartbeat_age_seconds", jobLabels(ns, name)...); ok && v < 3 {
			return fmt.Errorf("heartbeat age %v while paused", v)
		}
		if v, ok := suite.metricValue(t, "tether_job_phase", append(jobLabels(ns, name), `phase="Running"`)...); !ok || v != 1 {
			return fmt.Errorf("tether_job_phase{phase=Running}=%v", v)
		}
		return nil
	})
	eventually(t, 10*time.Second, "HeartbeatLost Event", func() error { return hasAll(suite.eventReasons(t, ns, name), "HeartbeatLost") })

	resume()
	suite.waitBinding(t, ns, name, 30*time.Second, "heartbeats resumed", func(wb *tetherv1.WorkerBinding) error {
		c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost)
		if c == nil || c.Status != "False" || c.Reason != tetherv1.ReasonHeartbeatResumed || wb.Status.Reason != tetherv1.ReasonHeartbeating {
			return fmt.Errorf("condition %+v", c)
		}
		if wb.Status.Attempt != 1 {
			return fmt.Errorf("attempt %d, want 1 (a pause is not a new attempt)", wb.Status.Attempt)
		}
		return nil
	})
	suite.waitBinding(t, ns, name, 60*time.Second, "Succeeded after the pause", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
}
