package lifecycle

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// The whole phase machine is driven through histories in
// pkg/controller/workerbinding/history_test.go; these are the rules one at a time.

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func pod(uid string) Pod { return Pod{Name: "p-" + uid, UID: uid} }

func podOf(rank int32, uid string) Pod { return Pod{Rank: rank, Name: "p-" + uid, UID: uid} }

// running is a one-node binding whose pod a registered and heartbeats.
func running() *tetherv1.WorkerBindingStatus {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	SetNodeCount(st, 1)
	PodSeen(st, pod("a"), true, t0)
	Heartbeat(st, 0, "a", t0, 1, nil)
	return st
}

func verified() tetherv1.NodeArtifacts {
	return tetherv1.NodeArtifacts{Manifest: "j/manifest.json", Verified: true, Files: 2}
}

func TestHappyPath(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	SetNodeCount(st, 1)
	steps := []struct {
		name  string
		apply func() bool
		phase tetherv1.WorkerBindingPhase
	}{
		{"register", func() bool { c, _ := PodSeen(st, pod("a"), true, t0); return c }, tetherv1.PhaseRegistered},
		{"heartbeat", func() bool { return Heartbeat(st, 0, "a", t0, 1, nil) }, tetherv1.PhaseRunning},
		{"finishing", func() bool { return Finishing(st, 0, "a", "SIGTERM") }, tetherv1.PhaseFinishing},
		{"exit 0", func() bool { c, _ := TrainerExited(st, 0, "a", Exit{FinishedAt: t0.Add(time.Minute)}, 0, t0); return c }, tetherv1.PhaseFinishing},
		{"manifest", func() bool { return ArtifactsRecorded(st, 0, "a", verified()) }, tetherv1.PhaseFinishing},
		{"complete", func() bool { return JobCompleted(st) }, tetherv1.PhaseFinishing},
		{"promoted", func() bool { return ArtifactsPromoted(st) }, tetherv1.PhaseSucceeded},
	}
	for _, s := range steps {
		if !s.apply() {
			t.Fatalf("%s: reported no change", s.name)
		}
		if st.Phase != s.phase {
			t.Fatalf("%s: phase %s (%s), want %s", s.name, st.Phase, st.Message, s.phase)
		}
	}
	if st.Attempt != 1 || st.AttemptStartedBy != tetherv1.AttemptAdmission {
		t.Errorf("attempt = %d by %q, want 1 by Admission", st.Attempt, st.AttemptStartedBy)
	}
	if st.Worker == nil || st.Worker.PodUID != "a" {
		t.Errorf("worker %+v, want node 0's pod a", st.Worker)
	}
}

func TestNoRegression(t *testing.T) {
	st := running()
	Heartbeat(st, 0, "a", t0, 5, nil)
	// A restarted sidecar registers again from the same pod: nothing moves back.
	if c, started := PodSeen(st, pod("a"), true, t0.Add(time.Minute)); c || started != "" {
		t.Errorf("re-registration of the same pod reported a change (started %q)", started)
	}
	if st.Phase != tetherv1.PhaseRunning {
		t.Errorf("phase %s after re-registration, want Running", st.Phase)
	}
	// An older sequence number does not lower LastSeq.
	Heartbeat(st, 0, "a", t0.Add(2*time.Minute), 3, nil)
	if st.LastSeq != 5 || st.Nodes[0].LastSeq != 5 {
		t.Errorf("LastSeq = %d (node %d), want 5", st.LastSeq, st.Nodes[0].LastSeq)
	}
}

func TestFinalPhasesAreFinal(t *testing.T) {
	for _, final := range []func(*tetherv1.WorkerBindingStatus){
		func(st *tetherv1.WorkerBindingStatus) {
			ArtifactsRecorded(st, 0, "a", verified())
			JobCompleted(st)
			ArtifactsPromoted(st)
		},
		func(st *tetherv1.WorkerBindingStatus) { JobFailed(st, "TrainJob failed") },
		func(st *tetherv1.WorkerBindingStatus) { Cancelled(st, "by test") },
	} {
		st := running()
		final(st)
		was := *st.DeepCopy()
		// A new pod resumes a cancelled job (TestCancelHistories); the
		// cancelled attempt's own pod does not.
		registering := "b"
		if Resumable(st) {
			registering = "a"
		}
		for name, ev := range map[string]func() bool{
			"register":  func() bool { c, _ := PodSeen(st, pod(registering), true, t0); return c },
			"heartbeat": func() bool { return Heartbeat(st, 0, "a", t0, 9, nil) },
			"lost":      func() bool { return HeartbeatLost(st, 0, "x") },
			"finishing": func() bool { return Finishing(st, 0, "a", "x") },
			"exit": func() bool {
				c, _ := TrainerExited(st, 0, "a", Exit{Code: 1, FinishedAt: t0.Add(time.Hour)}, 1, t0)
				return c
			},
			"suspended": func() bool { return Suspended(st, "x") },
			"failed":    func() bool { return JobFailed(st, "x") },
		} {
			if ev() {
				t.Errorf("%s after %s changed the status", name, was.Phase)
			}
		}
		if st.Phase != was.Phase || st.Reason != was.Reason {
			t.Errorf("final %s/%s became %s/%s", was.Phase, was.Reason, st.Phase, st.Reason)
		}
	}
}

func TestATrainerExitIsNoVerdict(t *testing.T) {
	st := running()
	c, isNew := TrainerExited(st, 0, "a", Exit{Code: 3, Reason: "Error", FinishedAt: t0.Add(time.Minute)}, 0, t0)
	if !c || !isNew {
		t.Fatalf("exit not recorded as new: changed %v new %v", c, isNew)
	}
	if st.Phase != tetherv1.PhaseRunning || st.TrainerExitCode == nil || *st.TrainerExitCode != 3 || st.TrainerExits != 1 {
		t.Fatalf("status %s/%s exit %v count %d, want Running with exit 3 recorded once", st.Phase, st.Reason, st.TrainerExitCode, st.TrainerExits)
	}
	if _, again := TrainerExited(st, 0, "a", Exit{Code: 3, FinishedAt: t0.Add(time.Minute)}, 0, t0); again {
		t.Error("the same exit seen again counted as new")
	}
	// The kubelet restarts it: attempt 2, the exit marked restarted.
	TrainerExited(st, 0, "a", Exit{Code: 3, FinishedAt: t0.Add(time.Minute)}, 1, t0.Add(2*time.Minute))
	if st.Attempt != 2 || st.AttemptStartedBy != tetherv1.AttemptTrainerRestarted || !st.Nodes[0].LastExit.Restarted || st.Nodes[0].Restarts != 1 {
		t.Fatalf("restart in place: attempt %d by %s, node %+v", st.Attempt, st.AttemptStartedBy, st.Nodes[0])
	}
	JobFailed(st, "TrainJob failed: BackoffLimitExceeded")
	if st.Reason != tetherv1.ReasonTrainerFailed || !strings.Contains(st.Message, "exited with code 3 (Error)") {
		t.Errorf("verdict %s %q does not name the last exit", st.Reason, st.Message)
	}
	// A TrainJob that failed with no failing exit seen (its pods are gone).
	st2 := running()
	JobFailed(st2, "TrainJob failed: DeadlineExceeded")
	if st2.Reason != tetherv1.ReasonJobFailed {
		t.Errorf("reason %s, want JobFailed", st2.Reason)
	}
}

func TestHeartbeatLostAndRecoveredPerNode(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	SetNodeCount(st, 3)
	for r, uid := range []string{"a", "b", "c"} {
		PodSeen(st, Pod{Rank: int32(r), Name: "p-" + uid, UID: uid, NodeName: "n" + uid}, true, t0)
		Heartbeat(st, int32(r), uid, t0, 1, nil)
	}
	if !HeartbeatLost(st, 2, "no heartbeat for 40s") || !IsHeartbeatLost(st) || st.Reason != tetherv1.ReasonHeartbeatLost {
		t.Fatalf("HeartbeatLost not recorded: %+v", st)
	}
	if HeartbeatLost(st, 2, "again") {
		t.Error("a second HeartbeatLost for the same silence reported a change")
	}
	HeartbeatLost(st, 0, "session ended")
	msg := st.Message
	for _, want := range []string{"node 2 (pod p-c on nc): silent since", "node 0 (pod p-a on na): session ended"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	Heartbeat(st, 0, "a", t0.Add(time.Minute), 2, nil)
	if !IsHeartbeatLost(st) || strings.Contains(st.Message, "node 0") {
		t.Fatalf("after node 0 resumed: lost %v, message %q", IsHeartbeatLost(st), st.Message)
	}
	Heartbeat(st, 2, "c", t0.Add(time.Minute), 2, nil)
	if IsHeartbeatLost(st) || st.Phase != tetherv1.PhaseRunning || st.Reason != tetherv1.ReasonHeartbeating {
		t.Errorf("after recovery %s/%s lost %v, want Running/Heartbeating", st.Phase, st.Reason, IsHeartbeatLost(st))
	}
}

// A node whose pod is terminating goes silent when its pod ends: that is no
// lost heartbeat, and a Finishing binding stays Finishing until the
// controller's verdict (it went back to Running/HeartbeatLost while the
// leader was away, e2e scenario 4).
func TestATerminatingNodesSilenceIsNotLost(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	SetNodeCount(st, 2)
	for r, uid := range []string{"a", "b"} {
		PodSeen(st, Pod{Rank: int32(r), Name: "p-" + uid, UID: uid, NodeName: "n" + uid}, true, t0)
		Heartbeat(st, int32(r), uid, t0, 1, nil)
	}
	Finishing(st, 0, "a", "SIGTERM")
	if HeartbeatLost(st, 0, "no heartbeat for 20s since the session ended") {
		t.Fatal("the silence of a node whose pod is terminating was recorded as HeartbeatLost")
	}
	if !HeartbeatLost(st, 1, "no heartbeat for 20s") || st.Reason != tetherv1.ReasonHeartbeatLost {
		t.Fatalf("a running node's silence: %s/%s, want Running/HeartbeatLost", st.Phase, st.Reason)
	}
	if strings.Contains(st.Message, "node 0") {
		t.Errorf("message %q names the terminating node as silent", st.Message)
	}
	st = &tetherv1.WorkerBindingStatus{}
	Initial(st)
	PodSeen(st, Pod{Name: "p-a", UID: "a", NodeName: "na"}, true, t0)
	Heartbeat(st, 0, "a", t0, 1, nil)
	Finishing(st, 0, "a", "SIGTERM")
	if HeartbeatLost(st, 0, "no heartbeat for 20s since the session ended") || st.Phase != tetherv1.PhaseFinishing {
		t.Fatalf("a Finishing binding after its only node's silence: %s/%s, want Finishing", st.Phase, st.Reason)
	}
}

func TestPreemptionStartsANewAttempt(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	if !Suspended(st, "queued") || st.Reason != tetherv1.ReasonSuspended {
		t.Fatalf("initial suspension: %+v", st)
	}
	if !Resumed(st) || st.Phase != tetherv1.PhasePending || st.Reason != tetherv1.ReasonAdmitted || Resumed(st) {
		t.Fatalf("admission out of the queue: %+v", st)
	}
	PodSeen(st, pod("a"), true, t0)
	Heartbeat(st, 0, "a", t0, 1, nil)
	if !Suspended(st, "evicted") || st.Phase != tetherv1.PhasePending || st.Reason != tetherv1.ReasonPreempted || st.Worker != nil {
		t.Fatalf("eviction of a running job: %+v", st)
	}
	// The old pod's sidecar, still heartbeating, does not revive the attempt.
	Heartbeat(st, 0, "a", t0.Add(time.Second), 2, nil)
	if st.Phase != tetherv1.PhasePending {
		t.Fatalf("heartbeat of the preempted pod moved the phase to %s", st.Phase)
	}
	if !Resumed(st) || st.Reason != tetherv1.ReasonPreempted || !strings.Contains(st.Message, "admitted again") {
		t.Fatalf("re-admission before registration: %+v", st)
	}
	_, started := PodSeen(st, pod("b"), true, t0.Add(time.Minute))
	if st.Phase != tetherv1.PhaseRegistered || st.Attempt != 2 || started != tetherv1.AttemptReadmission || st.Worker.PodUID != "b" {
		t.Fatalf("re-admission: started %q, %+v", started, st)
	}
	if c := st.Worker.RegisteredTime; !c.Equal(&metav1.Time{Time: t0.Add(time.Minute)}) {
		t.Errorf("registered time %v", c)
	}
}

// Found by the e2e preemption scenario: the manifest the preempted attempt
// flushed must not complete the next attempt before its own files are in.
func TestAManifestDoesNotOutliveItsAttempt(t *testing.T) {
	st := running()
	UploadReported(st, 0, "a", 100, "")
	ArtifactsRecorded(st, 0, "a", verified())
	Suspended(st, "evicted")
	// The preempted sidecar's flush lands after the suspension.
	ArtifactsRecorded(st, 0, "a", verified())
	if ManifestVerified(st) {
		t.Fatal("a manifest recorded between attempts counts as verified")
	}
	PodSeen(st, pod("b"), true, t0.Add(time.Minute))
	if ManifestVerified(st) || st.Artifacts.Files != 0 || st.Artifacts.UploadedBytes != 100 {
		t.Fatalf("new attempt kept the old verdict or lost the counters: %+v", st.Artifacts)
	}
	Heartbeat(st, 0, "b", t0.Add(time.Minute), 2, nil)
	JobCompleted(st)
	if st.Phase != tetherv1.PhaseFinishing || st.Reason != tetherv1.ReasonAwaitingArtifacts {
		t.Fatalf("attempt 2 complete before its manifest: %s/%s, want Finishing/AwaitingArtifacts", st.Phase, st.Reason)
	}
}

func TestFlushUnverifiedNamesTheFiles(t *testing.T) {
	st := running()
	Finishing(st, 0, "a", "SIGTERM")
	paths := []string{"checkpoints/a.pt", "checkpoints/b.pt"}
	why := `"checkpoints/a.pt": not verified: open: permission denied (mode 0600, owner uid 0 gid 0; the sidecar runs as uid 65532, gid 65532)`
	if !FlushUnverified(st, 0, paths, 12, why) {
		t.Fatal("reported no change")
	}
	if FlushUnverified(st, 0, paths, 12, why) {
		t.Error("the same report twice reported a change")
	}
	a := st.Artifacts
	if len(a.Missing) != 2 || a.MissingCount != 12 || a.LastError != why {
		t.Fatalf("artifacts %+v", a)
	}
	JobCompleted(st)
	ArtifactsIncomplete(st, MissingArtifacts(st))
	for _, want := range []string{"12 file(s)", "checkpoints/a.pt, checkpoints/b.pt", "and 10 more", "permission denied"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("message %q lacks %q", st.Message, want)
		}
	}
	// A report that lands after the verdict tells the verdict again.
	st2 := running()
	JobCompleted(st2)
	ArtifactsIncomplete(st2, MissingArtifacts(st2))
	if !FlushUnverified(st2, 0, paths[:1], 1, why) || !strings.Contains(st2.Message, "checkpoints/a.pt") {
		t.Errorf("late report: message %q", st2.Message)
	}
}

func TestNodesKeepTheirOwnFilesApart(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	SetNodeCount(st, 2)
	PodSeen(st, podOf(0, "a"), true, t0)
	PodSeen(st, podOf(1, "b"), true, t0)
	Finishing(st, 1, "b", "SIGTERM")
	FlushUnverified(st, 1, []string{"ckpt/__1_0.distcp"}, 1, "permission denied")
	ArtifactsRecorded(st, 0, "a", tetherv1.NodeArtifacts{Manifest: "j/manifest.json", Verified: true, Files: 3, Bytes: 30})
	a := st.Artifacts
	if a.ManifestVerified || a.Files != 3 || len(a.Missing) != 1 || a.Missing[0] != "nodes/1/ckpt/__1_0.distcp" || a.LastError != "node 1: permission denied" {
		t.Fatalf("aggregate %+v", a)
	}
	if got := MissingArtifacts(st); !strings.Contains(got, "node 1: no verified manifest: the worker's final flush could not verify 1 file(s), nodes/1/ckpt/__1_0.distcp") {
		t.Errorf("MissingArtifacts = %q", got)
	}
}

func TestAReplacedPodsManifestIsNotTheNodes(t *testing.T) {
	st := running()
	c, started := PodSeen(st, pod("b"), true, t0.Add(time.Minute))
	if !c || started != tetherv1.AttemptPodReplaced || st.Attempt != 2 {
		t.Fatalf("replacement: changed %v, started %q, attempt %d", c, started, st.Attempt)
	}
	// The old pod's final flush lands after its replacement registered.
	if ArtifactsRecorded(st, 0, "a", verified()) || ManifestVerified(st) {
		t.Fatal("the replaced pod's manifest was taken as the node's")
	}
	if !ArtifactsRecorded(st, 0, "b", verified()) || !ManifestVerified(st) {
		t.Fatal("the current pod's manifest was not recorded")
	}
}

// A node's final flush that names files it could not verify outranks any
// manifest of the same pod, whichever lands first: whoever holds the job's
// token can mint the pod's token and send an empty manifest for the node.
func TestAManifestDoesNotOverrideTheNodesOwnReport(t *testing.T) {
	twoNodes := func() *tetherv1.WorkerBindingStatus {
		st := &tetherv1.WorkerBindingStatus{}
		Initial(st)
		SetNodeCount(st, 2)
		PodSeen(st, podOf(0, "a"), true, t0)
		PodSeen(st, podOf(1, "b"), true, t0)
		ArtifactsRecorded(st, 0, "a", verified())
		return st
	}
	empty := tetherv1.NodeArtifacts{Manifest: "j/nodes/1/manifest.json", ManifestSHA256: strings.Repeat("e", 64), Verified: true}
	report := func(st *tetherv1.WorkerBindingStatus) bool {
		Finishing(st, 1, "b", "SIGTERM")
		return FlushUnverified(st, 1, []string{"shard.bin"}, 1, "permission denied")
	}
	for _, c := range []struct {
		name  string
		apply func(st *tetherv1.WorkerBindingStatus)
	}{
		{"report, then manifest", func(st *tetherv1.WorkerBindingStatus) {
			if !report(st) {
				t.Fatal("the report was not recorded")
			}
			if ArtifactsRecorded(st, 1, "b", empty) {
				t.Error("the manifest after the report was recorded")
			}
		}},
		{"manifest, then report", func(st *tetherv1.WorkerBindingStatus) {
			if !ArtifactsRecorded(st, 1, "b", empty) {
				t.Fatal("the manifest was not recorded")
			}
			if !report(st) {
				t.Error("the report after a verified manifest was not recorded")
			}
			if ArtifactsRecorded(st, 1, "b", empty) {
				t.Error("the manifest sent again after the report was recorded")
			}
		}},
	} {
		st := twoNodes()
		c.apply(st)
		JobCompleted(st)
		if ManifestVerified(st) || Promoting(st) {
			t.Fatalf("%s: node 1 counts as verified (%s/%s)", c.name, st.Phase, st.Reason)
		}
		ArtifactsIncomplete(st, MissingArtifacts(st))
		if st.Phase != tetherv1.PhaseFailed || !strings.Contains(st.Message, "node 1: no verified manifest: the worker's final flush could not verify 1 file(s), nodes/1/shard.bin") {
			t.Errorf("%s: %s/%s %q", c.name, st.Phase, st.Reason, st.Message)
		}
	}

	// A report while the binding promotes takes the verdict back.
	st := twoNodes()
	ArtifactsRecorded(st, 1, "b", empty)
	JobCompleted(st)
	if !Promoting(st) {
		t.Fatalf("%s/%s, want promoting", st.Phase, st.Reason)
	}
	report(st)
	if Promoting(st) || st.Reason != tetherv1.ReasonAwaitingArtifacts {
		t.Errorf("after the report: %s/%s, want Finishing/AwaitingArtifacts", st.Phase, st.Reason)
	}

	// A Succeeded binding is final.
	st = twoNodes()
	ArtifactsRecorded(st, 1, "b", empty)
	JobCompleted(st)
	ArtifactsPromoted(st)
	if report(st) || st.Phase != tetherv1.PhaseSucceeded {
		t.Errorf("a report changed a Succeeded binding: %s/%s", st.Phase, st.Reason)
	}
}

// The report counts only for the node's current pod once it said it is
// terminating: an old pod's report that lands after its replacement came
// does not hold the new pod's manifest back.
func TestAReplacedPodsReportIsNotTheNodes(t *testing.T) {
	st := running()
	Finishing(st, 0, "a", "SIGTERM")
	PodSeen(st, pod("b"), true, t0.Add(time.Minute))
	// The old pod's finishing frame: Finishing finds another pod, so the
	// report is dropped.
	Finishing(st, 0, "a", "SIGTERM")
	if FlushUnverified(st, 0, []string{"ckpt.pt"}, 1, "store down") {
		t.Fatal("the replaced pod's report was recorded on its successor")
	}
	if !ArtifactsRecorded(st, 0, "b", verified()) || !ManifestVerified(st) {
		t.Fatal("the new pod's manifest was not recorded")
	}
	// A new attempt forgets a report.
	st = running()
	Finishing(st, 0, "a", "SIGTERM")
	FlushUnverified(st, 0, []string{"ckpt.pt"}, 1, "store down")
	PodSeen(st, pod("c"), true, t0.Add(time.Minute))
	if !ArtifactsRecorded(st, 0, "c", verified()) {
		t.Fatal("the next attempt's manifest was held back by the last attempt's report")
	}
}

func TestVerifiedNodes(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	SetNodeCount(st, 2)
	PodSeen(st, podOf(0, "a"), true, t0)
	PodSeen(st, podOf(1, "b"), true, t0)
	if got := VerifiedNodes(st); got != nil {
		t.Fatalf("VerifiedNodes before any manifest = %v", got)
	}
	a := verified()
	a.ManifestSHA256 = strings.Repeat("1", 64)
	ArtifactsRecorded(st, 1, "b", a)
	if got := VerifiedNodes(st); len(got) != 1 || got[1] != a.ManifestSHA256 {
		t.Fatalf("VerifiedNodes = %v, want node 1's", got)
	}
	// Node 1's pod is replaced: the new attempt writes again.
	PodSeen(st, podOf(1, "c"), true, t0.Add(time.Minute))
	if got := VerifiedNodes(st); got != nil {
		t.Errorf("VerifiedNodes after node 1's pod was replaced = %v", got)
	}
}
