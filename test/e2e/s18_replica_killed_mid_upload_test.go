package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 18: the replica holding a sidecar's session is SIGKILLed while
// a 256 MiB checkpoint is being uploaded. The binding
// "Service" is made to send the sidecar's connections to replica 0 (so its
// session and, in proxy mode, its upload are there); when part of the
// checkpoint has reached the store, replica 0 is killed. The sidecar
// reconnects to replica 1 and the job ends Succeeded with every file
// verified, the checkpoint stored whole. 256 MiB is past the binding
// server's 64 MiB multipart threshold: the checkpoint is four parts of 64
// MiB, stored through replica 0 (proxy) or straight to the store through
// part URLs replica 0 signed, replica 0 to complete them (direct). The cut
// upload resumes after the parts already stored: the sidecar logs the
// bytes it did not send again, and the store gets less than two parts
// again.
// Stand-in: PodRunner runs the pod's real sidecar and the trainer stand-in
// (kwok).
func TestScenario18ReplicaKilledMidUpload(t *testing.T) {
	timed(t)
	// Direct: the parts go straight to the store, replica 0 holds the
	// session, signs the parts and completes them. Proxy (the fs backend's
	// and small files' path): the body streams through replica 0 and is
	// cut.
	for _, mode := range []string{"direct", "proxy"} {
		t.Run(mode, func(t *testing.T) { replicaKilledMidUpload(t, mode) })
	}
}

func replicaKilledMidUpload(t *testing.T, mode string) {
	ns := suite.newNamespace(t, "replica-kill-"+mode)
	const name = "big-checkpoint"
	const checkpointBytes = 256 << 20
	const partSize = upload.DefaultPartSize // the control plane's default --artifact-part-size
	plan := localcluster.TrainerPlan{Steps: 10, CheckpointEvery: 5, StepInterval: time.Second,
		CheckpointBytes: checkpointBytes, ModelBytes: 1 << 20}
	// Direct mode is killed a quarter in, as ever. Proxy mode half-way:
	// the first part is stored and recorded by then, and an upload sent
	// again from its start would re-send at least the two parts' worth
	// that had passed, which a resumed one never does.
	killAt := int64(checkpointBytes / 4)
	if mode == "proxy" {
		plan.SidecarEnv = []string{"TETHER_DIRECT_UPLOAD=off"}
		killAt = checkpointBytes / 2
	}
	suite.tether.PreferBindingReplica(0)
	defer suite.tether.PreferBindingReplica(-1)
	suite.restartOnCleanup(t, 0)

	before := suite.s3Traffic(t)
	jobID, pod := suite.startRunning(t, ns, name, plan)
	sidecar := suite.runner.Sidecar(pod.UID)
	if sidecar == nil {
		t.Fatalf("no sidecar process for pod %s", pod.Name)
	}
	if v := suite.replicaMetric(t, 0, "tether_job_session_connected", jobLabels(ns, name)...); v != 1 {
		t.Fatalf("replica 0 does not hold the session (tether_job_session_connected %v)", v)
	}

	// Part of a checkpoint in the store: an upload is in flight (through
	// replica 0, in parts, in proxy mode; straight to the store in direct
	// mode, replica 0 then holding the session and the upload's commit).
	path := suite.waitStorePut(t, before, checkpointBytes, killAt, 60*time.Second, jobID)
	// What had reached the store when the kill began (KillReplica takes
	// the replica out of the Services, then kills it and waits for it to
	// end, the upload going on until the kill and resuming meanwhile).
	atKill := suite.s3Traffic(t).Since(before).ByPath[path]
	if err := suite.tether.KillReplica(0); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	suite.tether.PreferBindingReplica(-1)
	logf("scenario 18 (%s): replica 0 SIGKILLed with %d of %d checkpoint bytes PUT to %s (%d parts)", mode, atKill.Bytes, checkpointBytes, path, atKill.Parts)

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
	resumed := loggedResumedBytes(t, sidecar.LogFile)
	// Both modes store the checkpoint in parts: through replica 0 (proxy),
	// or straight to the store, replica 0 holding the session, the part
	// URLs and the commit (direct). Whatever the kill cut, the parts the
	// store holds are not sent again.
	switch {
	case resumed%partSize != 0:
		t.Errorf("%s mode: the sidecar logged %d bytes resumed, not whole parts of %d", mode, resumed, partSize)
	case mode == "proxy" && resumed < partSize:
		t.Errorf("proxy mode: the sidecar logged %d bytes resumed, want at least one part of %d: the upload through the killed replica did not resume after its stored parts (%s)",
			resumed, partSize, cost)
	case cost.ResentBytes >= 2*partSize:
		t.Errorf("%s mode: the store got %d bytes again, two parts (%d) or more: the cut upload was sent again, not resumed after its stored parts (%s)",
			mode, cost.ResentBytes, 2*partSize, cost)
	}
	logf("scenario 18 (%s): session back on replica 1 %.1fs after the kill, checkpoint verified %.1fs after it, Succeeded %.1fs after it; "+
		"the sidecar resumed after %d bytes, %d bytes re-sent to the store; %s",
		mode, reconnected.Seconds(), checkpointBack.Seconds(), time.Since(killed).Seconds(), resumed, cost.ResentBytes, cost)
}

// loggedResumedBytes sums resumedBytes over the sync rounds' lines in a
// sidecar's JSON log: the bytes of uploaded files that were not sent again.
func loggedResumedBytes(t *testing.T, logFile string) int64 {
	t.Helper()
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sum int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			ResumedBytes *int64 `json:"resumedBytes"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.ResumedBytes != nil {
			sum += *line.ResumedBytes
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the sidecar's log %s: %v", logFile, err)
	}
	return sum
}
