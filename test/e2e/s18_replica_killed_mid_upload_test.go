package e2e

import (
	"fmt"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 18: the replica holding a sidecar's session is SIGKILLed while
// a 256 MiB checkpoint is being uploaded. The binding
// "Service" is made to send the sidecar's connections to replica 0 (so its
// session and, in proxy mode, its upload are there); when a quarter of the
// checkpoint has reached the store, replica 0 is killed. The sidecar
// reconnects to replica 1, the cut upload is sent again, and the job ends
// Succeeded with every file verified, the checkpoint stored whole.
// Stand-in: PodRunner runs the pod's real sidecar and the trainer stand-in
// (kwok).
func TestScenario18ReplicaKilledMidUpload(t *testing.T) {
	timed(t)
	// Direct: the body goes straight to the store, replica 0 holds the
	// session and the upload's commit. Proxy (the fs backend's and small
	// files' path): the body streams through replica 0 and is cut.
	for _, mode := range []string{"direct", "proxy"} {
		t.Run(mode, func(t *testing.T) { replicaKilledMidUpload(t, mode) })
	}
}

func replicaKilledMidUpload(t *testing.T, mode string) {
	ns := suite.newNamespace(t, "replica-kill-"+mode)
	const name = "big-checkpoint"
	const checkpointBytes = 256 << 20
	plan := localcluster.TrainerPlan{Steps: 10, CheckpointEvery: 5, StepInterval: time.Second,
		CheckpointBytes: checkpointBytes, ModelBytes: 1 << 20}
	if mode == "proxy" {
		plan.SidecarEnv = []string{"TETHER_DIRECT_UPLOAD=off"}
	}
	suite.tether.PreferBindingReplica(0)
	defer suite.tether.PreferBindingReplica(-1)
	suite.restartOnCleanup(t, 0)

	before := suite.s3Traffic(t)
	jobID, pod := suite.startRunning(t, ns, name, plan)
	if v := suite.replicaMetric(t, 0, "tether_job_session_connected", jobLabels(ns, name)...); v != 1 {
		t.Fatalf("replica 0 does not hold the session (tether_job_session_connected %v)", v)
	}

	// A quarter of a checkpoint in the store: an upload is in flight (through
	// replica 0 in proxy mode; straight to the store in direct mode, replica
	// 0 then holding the session and the upload's commit).
	path := suite.waitStorePut(t, before, checkpointBytes, checkpointBytes/4, 60*time.Second, jobID)
	if err := suite.tether.KillReplica(0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	suite.tether.PreferBindingReplica(-1)
	atKill := suite.s3Traffic(t).Since(before).ByPath[path]
	logf("scenario 18 (%s): replica 0 SIGKILLed with %d of %d checkpoint bytes PUT to %s", mode, atKill.Bytes, checkpointBytes, path)

	eventually(t, 60*time.Second, "the session on replica 1", func() error {
		if v := suite.replicaMetric(t, 1, "tether_job_session_connected", jobLabels(ns, name)...); v != 1 {
			return fmt.Errorf("replica 1: tether_job_session_connected %v", v)
		}
		return nil
	})
	reconnected := time.Since(killed)
	dir := suite.runner.ArtifactDir(pod)
	// The sidecar counts a file's bytes once the store's ETag matched.
	suite.waitBinding(t, ns, name, 90*time.Second, "the checkpoint verified after the kill", func(wb *tetherv1.WorkerBinding) error {
		if len(wb.Status.Nodes) == 0 || wb.Status.Nodes[0].UploadedBytes < checkpointBytes {
			return fmt.Errorf("nodes %+v", wb.Status.Nodes)
		}
		return nil
	})
	checkpointBack := time.Since(killed)

	wb, _ := suite.expectSucceededWithArtifacts(t, pod, name, jobID)
	if wb.Status.Attempt != 1 {
		t.Errorf("attempt %d, want 1: a control-plane crash is no new attempt", wb.Status.Attempt)
	}
	cost := jobStoreCost(t, suite.s3Traffic(t).Since(before), jobID, dir)
	if cost.ResentBytes < 0 {
		t.Errorf("the store got %d bytes for %d bytes of files: a file was claimed but not sent whole", cost.Bytes, cost.LocalBytes)
	}
	if mode == "proxy" && cost.RetriedPuts == 0 {
		t.Errorf("proxy mode: the upload through the killed replica was not cut (%s)", cost)
	}
	logf("scenario 18 (%s): session back on replica 1 %.1fs after the kill, checkpoint verified %.1fs after it, Succeeded %.1fs after it; %s",
		mode, reconnected.Seconds(), checkpointBack.Seconds(), time.Since(killed).Seconds(), cost)
}
