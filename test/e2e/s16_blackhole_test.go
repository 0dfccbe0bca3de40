package e2e

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// blackholeFor is how long scenario 16 partitions the sidecars from the
// binding server.
const blackholeFor = 2 * time.Minute

// Scenario 16: mid-job, the network between the sidecar and the binding
// server becomes a black hole for 2 minutes (the loopback "Service"
// accepts and delivers nothing, in both directions, on open and new
// connections; heartbeats and uploads alike). The binding reports
// HeartbeatLost and stays live; once the network is back the sidecar
// reconnects on its own, heartbeats resume, the uploads cut off are sent
// again, and the job succeeds with every artifact verified. Stand-in:
// PodRunner runs the pod's real sidecar and the trainer stand-in (kwok).
func TestScenario16BindingBlackholed(t *testing.T) {
	timed(t)
	ns := suite.newNamespace(t, "blackhole")
	const name = "partitioned"
	jobID, pod := suite.startRunning(t, ns, name, localcluster.TrainerPlan{Steps: 190, CheckpointEvery: 20, StepInterval: time.Second})
	suite.expectCheckpointDuringTraining(t, pod, jobID)

	sessionsBefore, _ := suite.metricValue(t, "tether_binding_sessions_opened_total")
	filesBefore, _ := suite.metricValue(t, "tether_artifacts_verified_files_total")
	bytesBefore, _ := suite.metricValue(t, "tether_artifacts_verified_bytes_total")
	storedBefore := suite.stored(t, jobID)
	modifiedBefore := suite.lastModified(t, jobID)
	trafficBefore := suite.s3Traffic(t)
	if err := suite.tether.BlackholeBinding(true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	defer func() { _ = suite.tether.BlackholeBinding(false) }()

	suite.waitBinding(t, ns, name, 30*time.Second, "HeartbeatLost during the black hole", func(wb *tetherv1.WorkerBinding) error {
		if !meta.IsStatusConditionTrue(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost) {
			return fmt.Errorf("no HeartbeatLost yet")
		}
		return nil
	})
	lostAfter := time.Since(start)
	time.Sleep(time.Until(start.Add(blackholeFor)))
	wb, err := suite.getBinding(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if wb.Status.Phase != tetherv1.PhaseRunning || wb.Status.Attempt != 1 {
		t.Fatalf("at the end of the black hole: %s/%s attempt %d; want the binding live (Running, attempt 1)", wb.Status.Phase, wb.Status.Reason, wb.Status.Attempt)
	}
	if err := suite.tether.BlackholeBinding(false); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	suite.waitBinding(t, ns, name, 90*time.Second, "heartbeats resumed after the black hole", func(wb *tetherv1.WorkerBinding) error {
		if c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost); c == nil || c.Status != "False" {
			return fmt.Errorf("HeartbeatLost still %+v", c)
		}
		return nil
	})
	recovered := time.Since(end)

	wb, local := suite.expectSucceededWithArtifacts(t, pod, name, jobID)
	if wb.Status.Attempt != 1 {
		t.Errorf("attempt %d, want 1: a partition is no new attempt", wb.Status.Attempt)
	}
	sessionsAfter, _ := suite.metricValue(t, "tether_binding_sessions_opened_total")
	filesAfter, _ := suite.metricValue(t, "tether_artifacts_verified_files_total")
	bytesAfter, _ := suite.metricValue(t, "tether_artifacts_verified_bytes_total")
	// A file verified before the hole and unchanged since is never stored
	// again. (Files that change, such as the progress file, and an upload
	// whose 200 the hole swallowed, are sent again: the sidecar cannot know
	// the server verified them.)
	modifiedAfter := suite.lastModified(t, jobID)
	resent := 0
	for rel, sum := range storedBefore {
		if local[rel] == sum && !modifiedAfter[rel].Equal(modifiedBefore[rel]) {
			resent++
			t.Errorf("%s, verified before the black hole and unchanged, was stored again", rel)
		}
	}
	cost := jobStoreCost(t, suite.s3Traffic(t).Since(trafficBefore), jobID, suite.runner.ArtifactDir(pod))
	logf("scenario 16: HeartbeatLost %.1fs into a %s black hole; heartbeats back %.1fs after it ended; %v sessions opened since; "+
		"%v verified PUTs (%v bytes) since the hole began, for a job of %d files (%d bytes); %d files verified before it stored again; "+
		"at the store since the hole began: %s",
		lostAfter.Seconds(), blackholeFor, recovered.Seconds(), sessionsAfter-sessionsBefore, filesAfter-filesBefore,
		bytesAfter-bytesBefore, len(local), wb.Status.Artifacts.Bytes, resent, cost)
}
