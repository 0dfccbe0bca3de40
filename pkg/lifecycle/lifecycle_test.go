package lifecycle

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func pod(uid string) tetherv1.WorkerStatus {
	return tetherv1.WorkerStatus{PodName: "p-" + uid, PodUID: uid}
}

func TestHappyPath(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	steps := []struct {
		name  string
		apply func() bool
		phase tetherv1.WorkerBindingPhase
	}{
		{"register", func() bool { return Registered(st, pod("a"), t0) }, tetherv1.PhaseRegistered},
		{"heartbeat", func() bool { return Heartbeat(st, t0, 1, nil) }, tetherv1.PhaseRunning},
		{"finishing", func() bool { return Finishing(st, "SIGTERM") }, tetherv1.PhaseFinishing},
		{"exit 0", func() bool { return TrainerExited(st, 0) }, tetherv1.PhaseFinishing},
		{"manifest", func() bool {
			return ArtifactsRecorded(st, tetherv1.ArtifactsStatus{Manifest: "j/manifest.json", ManifestVerified: true, Files: 2})
		}, tetherv1.PhaseSucceeded},
	}
	for _, s := range steps {
		if !s.apply() {
			t.Fatalf("%s: reported no change", s.name)
		}
		if st.Phase != s.phase {
			t.Fatalf("%s: phase %s, want %s", s.name, st.Phase, s.phase)
		}
	}
	if st.Attempt != 1 {
		t.Errorf("attempt = %d, want 1", st.Attempt)
	}
}

func TestNoRegression(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	Registered(st, pod("a"), t0)
	Heartbeat(st, t0, 5, nil)
	// A restarted sidecar registers again from the same pod: nothing moves back.
	if Registered(st, pod("a"), t0.Add(time.Minute)) {
		t.Error("re-registration of the same pod reported a change")
	}
	if st.Phase != tetherv1.PhaseRunning {
		t.Errorf("phase %s after re-registration, want Running", st.Phase)
	}
	// An older sequence number does not lower LastSeq.
	Heartbeat(st, t0.Add(2*time.Minute), 3, nil)
	if st.LastSeq != 5 {
		t.Errorf("LastSeq = %d, want 5", st.LastSeq)
	}
}

func TestFinalPhasesAreFinal(t *testing.T) {
	for _, final := range []func(*tetherv1.WorkerBindingStatus) bool{
		func(st *tetherv1.WorkerBindingStatus) bool {
			ArtifactsRecorded(st, tetherv1.ArtifactsStatus{Manifest: "m", ManifestVerified: true})
			return TrainerExited(st, 0)
		},
		func(st *tetherv1.WorkerBindingStatus) bool { return TrainerExited(st, 137) },
		func(st *tetherv1.WorkerBindingStatus) bool { return Cancelled(st, "by test") },
	} {
		st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
		Registered(st, pod("a"), t0)
		final(st)
		was := *st.DeepCopy()
		for name, ev := range map[string]func() bool{
			"register":  func() bool { return Registered(st, pod("b"), t0) },
			"heartbeat": func() bool { return Heartbeat(st, t0, 9, nil) },
			"lost":      func() bool { return HeartbeatLost(st, "x") },
			"finishing": func() bool { return Finishing(st, "x") },
			"exit":      func() bool { return TrainerExited(st, 1) },
			"suspended": func() bool { return Suspended(st, "x") },
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

func TestTrainerFailedRecordsExitCode(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning}
	TrainerExited(st, 3)
	if st.Phase != tetherv1.PhaseFailed || st.Reason != tetherv1.ReasonTrainerFailed || st.TrainerExitCode == nil || *st.TrainerExitCode != 3 {
		t.Errorf("status %+v, want Failed/TrainerFailed with exit code 3", st)
	}
	if st.Message != "trainer exited with code 3" {
		t.Errorf("message %q", st.Message)
	}
}

func TestHeartbeatLostAndRecovered(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	Registered(st, pod("a"), t0)
	Heartbeat(st, t0, 1, nil)
	if !HeartbeatLost(st, "silent") || !IsHeartbeatLost(st) || st.Reason != tetherv1.ReasonHeartbeatLost {
		t.Fatalf("HeartbeatLost not recorded: %+v", st)
	}
	if HeartbeatLost(st, "silent") {
		t.Error("a second HeartbeatLost for the same silence reported a change")
	}
	if !Heartbeat(st, t0.Add(time.Minute), 2, nil) || IsHeartbeatLost(st) {
		t.Fatalf("heartbeat did not clear HeartbeatLost: %+v", st.Conditions)
	}
	if st.Phase != tetherv1.PhaseRunning || st.Reason != tetherv1.ReasonHeartbeating {
		t.Errorf("after recovery %s/%s, want Running/Heartbeating", st.Phase, st.Reason)
	}
}

func TestPreemptionStartsANewAttempt(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	if !Suspended(st, "queued") || st.Reason != tetherv1.ReasonSuspended {
		t.Fatalf("initial suspension: %+v", st)
	}
	if !Resumed(st) || st.Phase != tetherv1.PhasePending || st.Reason != tetherv1.ReasonAdmitted || Resumed(st) {
		t.Fatalf("admission out of the queue: %+v", st)
	}
	Registered(st, pod("a"), t0)
	Heartbeat(st, t0, 1, nil)
	if !Suspended(st, "evicted") || st.Phase != tetherv1.PhasePending || st.Reason != tetherv1.ReasonPreempted || st.Worker != nil {
		t.Fatalf("eviction of a running job: %+v", st)
	}
	// The old pod's sidecar, still heartbeating, does not revive the attempt.
	Heartbeat(st, t0.Add(time.Second), 2, nil)
	if st.Phase != tetherv1.PhasePending {
		t.Fatalf("heartbeat of the preempted pod moved the phase to %s", st.Phase)
	}
	if !Resumed(st) || st.Reason != tetherv1.ReasonPreempted || !strings.Contains(st.Message, "admitted again") {
		t.Fatalf("re-admission before registration: %+v", st)
	}
	Registered(st, pod("b"), t0.Add(time.Minute))
	if st.Phase != tetherv1.PhaseRegistered || st.Attempt != 2 || st.Worker.PodUID != "b" {
		t.Fatalf("re-admission: %+v", st)
	}
	if c := st.Worker.RegisteredTime; !c.Equal(&metav1.Time{Time: t0.Add(time.Minute)}) {
		t.Errorf("registered time %v", c)
	}
}

func TestCompletionIsGatedOnVerifiedArtifacts(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	Registered(st, pod("a"), t0)
	Heartbeat(st, t0, 1, nil)
	// An unverified manifest (a file missing) does not complete the job.
	ArtifactsRecorded(st, tetherv1.ArtifactsStatus{Manifest: "j/manifest.json", Missing: []string{"model.pt"}})
	TrainerExited(st, 0)
	if st.Phase != tetherv1.PhaseFinishing || st.Reason != tetherv1.ReasonAwaitingArtifacts {
		t.Fatalf("exit 0 with an unverified manifest: %s/%s", st.Phase, st.Reason)
	}
	if !ArtifactsIncomplete(st, MissingArtifacts(st)) || st.Phase != tetherv1.PhaseFailed || st.Reason != tetherv1.ReasonArtifactsIncomplete {
		t.Fatalf("pod ended without a verified manifest: %s/%s", st.Phase, st.Reason)
	}
	if !strings.Contains(st.Message, "model.pt") {
		t.Errorf("message %q does not name the missing file", st.Message)
	}

	// Manifest first, exit 0 second: Succeeded at the exit.
	st = &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning}
	ArtifactsRecorded(st, tetherv1.ArtifactsStatus{Manifest: "j/manifest.json", ManifestVerified: true})
	if st.Phase != tetherv1.PhaseRunning {
		t.Fatalf("a verified manifest alone completed the job: %s", st.Phase)
	}
	TrainerExited(st, 0)
	if st.Phase != tetherv1.PhaseSucceeded {
		t.Fatalf("exit 0 after a verified manifest: %s", st.Phase)
	}

	// A failed trainer fails whatever its artifacts.
	st = &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning}
	ArtifactsRecorded(st, tetherv1.ArtifactsStatus{Manifest: "j/manifest.json", ManifestVerified: true})
	TrainerExited(st, 1)
	if st.Phase != tetherv1.PhaseFailed || st.Reason != tetherv1.ReasonTrainerFailed {
		t.Fatalf("exit 1: %s/%s", st.Phase, st.Reason)
	}
}

// Found by the e2e preemption scenario: the manifest the preempted attempt
// flushed must not complete the next attempt before its own files are in.
func TestAManifestDoesNotOutliveItsAttempt(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	Registered(st, pod("a"), t0)
	Heartbeat(st, t0, 1, nil)
	UploadReported(st, 100, "")
	ArtifactsRecorded(st, tetherv1.ArtifactsStatus{Manifest: "j/manifest.json", ManifestVerified: true, Files: 3})
	Suspended(st, "evicted")
	// The preempted sidecar's flush lands after the suspension.
	ArtifactsRecorded(st, tetherv1.ArtifactsStatus{Manifest: "j/manifest.json", ManifestVerified: true, Files: 4})
	if ManifestVerified(st) {
		t.Fatal("a manifest recorded between attempts counts as verified")
	}
	Registered(st, pod("b"), t0.Add(time.Minute))
	if ManifestVerified(st) || st.Artifacts.Files != 0 || st.Artifacts.UploadedBytes != 100 {
		t.Fatalf("new attempt kept the old verdict or lost the counters: %+v", st.Artifacts)
	}
	Heartbeat(st, t0.Add(time.Minute), 2, nil)
	TrainerExited(st, 0)
	if st.Phase != tetherv1.PhaseFinishing || st.Reason != tetherv1.ReasonAwaitingArtifacts {
		t.Fatalf("attempt 2 exit 0 before its manifest: %s/%s, want Finishing/AwaitingArtifacts", st.Phase, st.Reason)
	}
}

func TestFlushUnverifiedNamesTheFiles(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	Registered(st, pod("a"), t0)
	Heartbeat(st, t0, 1, nil)
	Finishing(st, "SIGTERM")
	paths := []string{"checkpoints/a.pt", "checkpoints/b.pt"}
	why := `"checkpoints/a.pt": not verified: open: permission denied (mode 0600, owner uid 0 gid 0; the sidecar runs as uid 65532, gid 65532)`
	if !FlushUnverified(st, paths, 12, why) {
		t.Fatal("reported no change")
	}
	if FlushUnverified(st, paths, 12, why) {
		t.Error("the same report twice reported a change")
	}
	a := st.Artifacts
	if len(a.Missing) != 2 || a.MissingCount != 12 || a.LastError != why {
		t.Fatalf("artifacts %+v", a)
	}
	TrainerExited(st, 0)
	ArtifactsIncomplete(st, MissingArtifacts(st))
	for _, want := range []string{"12 file(s)", "checkpoints/a.pt, checkpoints/b.pt", "and 10 more", "permission denied"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("message %q lacks %q", st.Message, want)
		}
	}
	// A report that lands after the verdict tells the verdict again.
	st2 := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending}
	Registered(st2, pod("b"), t0)
	TrainerExited(st2, 0)
	ArtifactsIncomplete(st2, MissingArtifacts(st2))
	if !FlushUnverified(st2, paths[:1], 1, why) || !strings.Contains(st2.Message, "checkpoints/a.pt") {
		t.Errorf("late report: message %q", st2.Message)
	}
	// A verified manifest is never overruled by a worker's report.
	st3 := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning,
		Artifacts: &tetherv1.ArtifactsStatus{Manifest: "j/manifest.json", ManifestVerified: true}}
	if FlushUnverified(st3, paths, 2, why) || len(st3.Artifacts.Missing) != 0 {
		t.Errorf("a verified manifest was changed: %+v", st3.Artifacts)
	}
}
