package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// s3OutageFor is how long scenario 21's store answers 503.
const s3OutageFor = 60 * time.Second

// Scenario 21: mid-job, the artifact store answers every request 503
// SlowDown for 60s (localcluster's S3 front, between the store and every
// client of it but the test). The trainer keeps writing checkpoints; their
// uploads are refused and retried, nothing is claimed verified, the
// binding stays live (heartbeats do not depend on the store); once the
// store is back the backlog is uploaded, and the job ends Succeeded with
// every artifact verified.
func TestScenario21S3Unavailable(t *testing.T) {
	timed(t)
	ns := suite.newNamespace(t, "s3-503")
	const name = "store-down"
	jobID, pod := suite.startRunning(t, ns, name, localcluster.TrainerPlan{Steps: 170, CheckpointEvery: 10, StepInterval: 500 * time.Millisecond, CheckpointBytes: 4 << 20})
	suite.expectCheckpointDuringTraining(t, pod, jobID)
	dir := suite.runner.ArtifactDir(pod)

	before := suite.s3Traffic(t)
	storedBefore := suite.stored(t, jobID)
	if err := suite.tether.FailS3(true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	defer func() { _ = suite.tether.FailS3(false) }()
	for time.Since(start) < s3OutageFor {
		time.Sleep(time.Second)
		wb, err := suite.getBinding(ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if meta.IsStatusConditionTrue(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost) || wb.Status.Phase != tetherv1.PhaseRunning {
			t.Fatalf("%.0fs into the store's outage: %s/%s: the binding must stay live (heartbeats do not need the store)",
				time.Since(start).Seconds(), wb.Status.Phase, wb.Status.Reason)
		}
	}
	if err := suite.tether.FailS3(false); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	during := suite.s3Traffic(t).Since(before)
	if during.Refused == 0 {
		t.Fatalf("the store refused nothing in %s: the outage was not felt (%s)", s3OutageFor, during)
	}
	// Nothing was stored while the store refused everything.
	for rel, sum := range suite.stored(t, jobID) {
		if storedBefore[rel] != sum && !strings.HasPrefix(rel, "tether-progress") {
			t.Errorf("%s was stored during the outage", rel)
		}
	}
	// The backlog: every checkpoint written by the end of the outage.
	backlog := map[string]string{}
	for rel, sum := range localFiles(t, dir) {
		if strings.HasPrefix(rel, "checkpoints/") && storedBefore[rel] != sum {
			backlog[rel] = sum
		}
	}
	if len(backlog) == 0 {
		t.Fatal("no checkpoint was written during the outage: the scenario tests nothing")
	}
	eventually(t, 60*time.Second, "the checkpoints written during the outage stored", func() error {
		stored := suite.stored(t, jobID)
		for rel, sum := range backlog {
			if stored[rel] != sum {
				return fmt.Errorf("%s not stored yet", rel)
			}
		}
		return nil
	})
	drained := time.Since(end)

	wb, _ := suite.expectSucceededWithArtifacts(t, pod, name, jobID)
	if wb.Status.Attempt != 1 {
		t.Errorf("attempt %d, want 1: a store outage is no new attempt", wb.Status.Attempt)
	}
	cost := jobStoreCost(t, suite.s3Traffic(t).Since(before), jobID, dir)
	logf("scenario 21: the store refused %d requests in %s; %d checkpoints written meanwhile were stored %.1fs after it was back; "+
		"Succeeded %.1fs after; since the outage began: %s", during.Refused, s3OutageFor, len(backlog), drained.Seconds(),
		time.Since(end).Seconds(), cost)
}
