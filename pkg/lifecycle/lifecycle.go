package lifecycle

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// rank orders the phases of one attempt; a transition may only go up.
var rank = map[tetherv1.WorkerBindingPhase]int{
	"":                       0,
	tetherv1.PhasePending:    0,
	tetherv1.PhaseRegistered: 1,
	tetherv1.PhaseRunning:    2,
	tetherv1.PhaseFinishing:  3,
	tetherv1.PhaseSucceeded:  4,
	tetherv1.PhaseFailed:     4,
}

// IsFinal reports whether phase is Succeeded or Failed.
func IsFinal(p tetherv1.WorkerBindingPhase) bool {
	return p == tetherv1.PhaseSucceeded || p == tetherv1.PhaseFailed
}

// advance moves st to phase if that is forward (or the same phase with a new
// reason) and st is not final. It reports whether anything changed.
func advance(st *tetherv1.WorkerBindingStatus, phase tetherv1.WorkerBindingPhase, reason, msg string) bool {
	if IsFinal(st.Phase) || rank[phase] < rank[st.Phase] {
		return false
	}
	if st.Phase == phase && st.Reason == reason && st.Message == msg {
		return false
	}
	st.Phase, st.Reason, st.Message = phase, reason, msg
	return true
}

// Initial gives a binding without a phase its first status: Pending, its
// token issued, waiting for the sidecar. It reports whether anything changed.
func Initial(st *tetherv1.WorkerBindingStatus) bool {
	if st.Phase != "" {
		return false
	}
	st.Phase, st.Reason, st.Message = tetherv1.PhasePending, tetherv1.ReasonTokenIssued, "waiting for the sidecar to register"
	return true
}

// Registered: a sidecar presented the binding's token from pod. A different
// pod than the attempt's registered one (a recreated pod) is recorded; the
// same pod registering again (a restarted sidecar) changes nothing.
func Registered(st *tetherv1.WorkerBindingStatus, pod tetherv1.WorkerStatus, now time.Time) bool {
	if IsFinal(st.Phase) {
		return false
	}
	changed := false
	if st.Worker == nil || st.Worker.PodUID != pod.PodUID {
		pod.RegisteredTime = metav1.NewTime(now)
		st.Worker = &pod
		changed = true
	}
	if st.Attempt == 0 || (st.Phase == tetherv1.PhasePending && st.Reason == tetherv1.ReasonPreempted) {
		st.Attempt++
		newAttempt(st)
		changed = true
	}
	return advance(st, tetherv1.PhaseRegistered, tetherv1.ReasonRegistered, "sidecar in pod "+pod.PodName+" registered") || changed
}

// Heartbeat records a heartbeat (at, seq, progress) and moves a registered
// binding to Running, clearing HeartbeatLost. It reports whether anything a
// reader would act on changed (phase or condition); the heartbeat fields
// themselves are always updated and written at the writer's own pace.
func Heartbeat(st *tetherv1.WorkerBindingStatus, at time.Time, seq int64, progress *tetherv1.Progress) bool {
	if IsFinal(st.Phase) {
		return false
	}
	t := metav1.NewTime(at)
	st.LastHeartbeatTime = &t
	if seq > st.LastSeq {
		st.LastSeq = seq
	}
	if progress != nil {
		st.Progress = progress
	}
	changed := false
	if c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionHeartbeatLost); c != nil && c.Status == metav1.ConditionTrue {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tetherv1.ConditionHeartbeatLost, Status: metav1.ConditionFalse,
			Reason: tetherv1.ReasonHeartbeatResumed, Message: "heartbeats resumed"})
		changed = true
		if st.Phase == tetherv1.PhaseRunning && st.Reason == tetherv1.ReasonHeartbeatLost {
			st.Reason, st.Message = tetherv1.ReasonHeartbeating, "heartbeats resumed"
		}
	}
	if st.Phase == tetherv1.PhasePending && st.Worker == nil {
		// A heartbeat without a registration in this attempt (it was preempted
		// and the old sidecar is still talking): nothing to advance.
		return changed
	}
	return advance(st, tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating, "worker is heartbeating") || changed
}

// HeartbeatLost marks a live binding whose worker missed its heartbeats.
func HeartbeatLost(st *tetherv1.WorkerBindingStatus, msg string) bool {
	if IsFinal(st.Phase) || st.Phase == tetherv1.PhasePending {
		return false
	}
	if c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionHeartbeatLost); c != nil && c.Status == metav1.ConditionTrue {
		return false
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tetherv1.ConditionHeartbeatLost, Status: metav1.ConditionTrue,
		Reason: tetherv1.ReasonHeartbeatLost, Message: msg})
	if st.Phase == tetherv1.PhaseRunning || st.Phase == tetherv1.PhaseRegistered {
		st.Reason, st.Message = tetherv1.ReasonHeartbeatLost, msg
	}
	return true
}

// IsHeartbeatLost reports whether the HeartbeatLost condition is True.
func IsHeartbeatLost(st *tetherv1.WorkerBindingStatus) bool {
	return meta.IsStatusConditionTrue(st.Conditions, tetherv1.ConditionHeartbeatLost)
}

// Finishing: the sidecar reported its pod is terminating.
func Finishing(st *tetherv1.WorkerBindingStatus, reason string) bool {
	if st.Phase == tetherv1.PhasePending {
		return false
	}
	return advance(st, tetherv1.PhaseFinishing, tetherv1.ReasonTerminating, "worker is terminating: "+reason)
}

// TrainerExited records the trainer container's exit code from pod status.
// A non-zero code fails the binding with TrainerFailed. Exit 0 succeeds it
// only once the artifact manifest is verified; until then the binding is
// Finishing, awaiting its artifacts.
func TrainerExited(st *tetherv1.WorkerBindingStatus, code int32) bool {
	if IsFinal(st.Phase) {
		return false
	}
	changed := st.TrainerExitCode == nil || *st.TrainerExitCode != code
	st.TrainerExitCode = &code
	if code != 0 {
		return advance(st, tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed, "trainer exited with code "+strconv.Itoa(int(code))) || changed
	}
	return gate(st) || changed
}

// ArtifactsRecorded stores the server's verdict on the job's manifest and
// completes the binding if the trainer already exited 0.
func ArtifactsRecorded(st *tetherv1.WorkerBindingStatus, a tetherv1.ArtifactsStatus) bool {
	if IsFinal(st.Phase) {
		return false
	}
	if st.Phase == tetherv1.PhasePending {
		// Between attempts (preempted): the manifest the ended attempt's
		// sidecar flushed says nothing about the next attempt's files.
		a.ManifestVerified = false
	}
	prev := st.Artifacts
	if prev != nil {
		// Counters the worker reports survive a manifest verdict.
		a.UploadedBytes = max(a.UploadedBytes, prev.UploadedBytes)
		a.Logs = prev.Logs
	}
	st.Artifacts = &a
	changed := prev == nil || prev.ManifestVerified != a.ManifestVerified || prev.Manifest != a.Manifest || prev.Files != a.Files ||
		prev.Bytes != a.Bytes || prev.LastError != a.LastError || len(prev.Missing) != len(a.Missing)
	return gate(st) || changed
}

// UploadReported records what the worker says of its uploads: the bytes it
// has had verified and its last upload failure ("" when none).
func UploadReported(st *tetherv1.WorkerBindingStatus, uploadedBytes int64, lastError string) bool {
	if st.Artifacts == nil {
		if uploadedBytes == 0 && lastError == "" {
			return false
		}
		st.Artifacts = &tetherv1.ArtifactsStatus{}
	}
	a := st.Artifacts
	changed := a.UploadedBytes != uploadedBytes || a.LastError != lastError
	a.UploadedBytes, a.LastError = uploadedBytes, lastError
	return changed
}

// ArtifactsIncomplete fails a binding whose trainer exited 0 but whose pod
// ended without a verified manifest.
func ArtifactsIncomplete(st *tetherv1.WorkerBindingStatus, detail string) bool {
	if IsFinal(st.Phase) || ManifestVerified(st) {
		return false
	}
	return advance(st, tetherv1.PhaseFailed, tetherv1.ReasonArtifactsIncomplete, "artifacts incomplete: "+detail)
}

// FlushUnverified records what the worker's final flush could not verify:
// up to ten paths, how many in all, and why the first failed. A binding with
// a verified manifest keeps that verdict; one already failed as
// ArtifactsIncomplete gets its message told again with the files named.
func FlushUnverified(st *tetherv1.WorkerBindingStatus, paths []string, count int, lastError string) bool {
	if len(paths) == 0 || ManifestVerified(st) {
		return false
	}
	if st.Artifacts == nil {
		st.Artifacts = &tetherv1.ArtifactsStatus{}
	}
	a := st.Artifacts
	if a.Manifest != "" {
		return false // the server's verdict on an uploaded manifest names what it lacks
	}
	paths = paths[:min(len(paths), binding.MaxReportedUnverified)]
	changed := !slices.Equal(a.Missing, paths) || int(a.MissingCount) != count || a.LastError != lastError
	a.Missing, a.MissingCount, a.LastError = slices.Clone(paths), int32(count), lastError
	if st.Phase == tetherv1.PhaseFailed && st.Reason == tetherv1.ReasonArtifactsIncomplete {
		if msg := "artifacts incomplete: " + MissingArtifacts(st); msg != st.Message {
			st.Message, changed = msg, true
		}
	}
	return changed
}

// ManifestVerified reports whether the server verified the job's manifest.
func ManifestVerified(st *tetherv1.WorkerBindingStatus) bool {
	return st.Artifacts != nil && st.Artifacts.ManifestVerified
}

// MissingArtifacts describes what keeps the manifest from being verified.
func MissingArtifacts(st *tetherv1.WorkerBindingStatus) string {
	switch a := st.Artifacts; {
	case a != nil && a.Manifest == "" && len(a.Missing) > 0:
		shown := a.Missing[:min(len(a.Missing), 3)]
		more := ""
		if n := int(a.MissingCount) - len(shown); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		return fmt.Sprintf("no manifest was uploaded: the worker's final flush could not verify %d file(s), %s%s; first error: %s",
			max(int(a.MissingCount), len(a.Missing)), strings.Join(shown, ", "), more, a.LastError)
	case a != nil && a.Manifest == "" && a.LastError != "":
		// The worker named no file, but said why it uploaded no manifest.
		return "no manifest was uploaded: " + a.LastError
	case a == nil || a.Manifest == "":
		return "no manifest was uploaded (the worker reported no upload error: did the sidecar run its final flush?)"
	case len(a.Missing) > 0:
		return fmt.Sprintf("%s is not stored as the manifest lists it", a.Missing[0])
	case a.LastError != "":
		return a.LastError
	default:
		return "the manifest was not verified"
	}
}

// gate is the completion rule: trainer exit 0 and a verified manifest.
func gate(st *tetherv1.WorkerBindingStatus) bool {
	if st.TrainerExitCode == nil || *st.TrainerExitCode != 0 {
		return false
	}
	if ManifestVerified(st) {
		return advance(st, tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded, "trainer exited 0 and every artifact is verified")
	}
	return advance(st, tetherv1.PhaseFinishing, tetherv1.ReasonAwaitingArtifacts, "trainer exited 0; waiting for the artifact manifest to be verified")
}

// Suspended: the TrainJob is suspended (Kueue holds it, or evicted it). A
// live attempt ends as Preempted; a binding that never ran stays Pending.
func Suspended(st *tetherv1.WorkerBindingStatus, msg string) bool {
	if IsFinal(st.Phase) {
		return false
	}
	if st.Phase == "" || st.Phase == tetherv1.PhasePending {
		if st.Reason == tetherv1.ReasonPreempted {
			return false
		}
		return set(st, tetherv1.PhasePending, tetherv1.ReasonSuspended, msg)
	}
	// The attempt is over: the next registration starts a new one.
	st.Worker = nil
	meta.RemoveStatusCondition(&st.Conditions, tetherv1.ConditionHeartbeatLost)
	return set(st, tetherv1.PhasePending, tetherv1.ReasonPreempted, msg)
}

// Resumed: the TrainJob is no longer suspended (Kueue admitted it). A
// binding that waited in the queue says so; a preempted one keeps its reason
// (the next registration starts the next attempt) with a current message.
func Resumed(st *tetherv1.WorkerBindingStatus) bool {
	if st.Phase != tetherv1.PhasePending {
		return false
	}
	switch st.Reason {
	case tetherv1.ReasonSuspended:
		return set(st, tetherv1.PhasePending, tetherv1.ReasonAdmitted, "TrainJob admitted; waiting for the sidecar to register")
	case tetherv1.ReasonPreempted:
		return set(st, tetherv1.PhasePending, tetherv1.ReasonPreempted,
			fmt.Sprintf("attempt %d was preempted; TrainJob admitted again, waiting for the sidecar to register", st.Attempt))
	}
	return false
}

// JobFailed applies the TrainJob's Failed condition when the trainer's exit
// code was not seen (for example its pod is already gone).
func JobFailed(st *tetherv1.WorkerBindingStatus, msg string) bool {
	return advance(st, tetherv1.PhaseFailed, tetherv1.ReasonJobFailed, msg)
}

// Cancelled: the orchestrator cancelled the job and the worker acknowledged.
func Cancelled(st *tetherv1.WorkerBindingStatus, msg string) bool {
	return advance(st, tetherv1.PhaseFailed, tetherv1.ReasonCancelled, msg)
}

func set(st *tetherv1.WorkerBindingStatus, phase tetherv1.WorkerBindingPhase, reason, msg string) bool {
	if st.Phase == phase && st.Reason == reason && st.Message == msg {
		return false
	}
	st.Phase, st.Reason, st.Message = phase, reason, msg
	return true
}

// FormatFloat renders a progress number for the API (no floats in CRDs).
func FormatFloat(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'g', 6, 64)
}

// Describe is a one-line summary for logs and Events.
func Describe(st *tetherv1.WorkerBindingStatus) string {
	return fmt.Sprintf("%s (%s)", st.Phase, st.Reason)
}

// newAttempt forgets what belonged to the attempt before: its trainer exit
// code and its manifest verdict (files already stored stay stored; the new
// attempt's sidecar uploads a manifest of its own). Reported upload counters
// and archived logs are kept.
func newAttempt(st *tetherv1.WorkerBindingStatus) {
	st.TrainerExitCode = nil
	if a := st.Artifacts; a != nil {
		st.Artifacts = &tetherv1.ArtifactsStatus{UploadedBytes: a.UploadedBytes, Logs: a.Logs}
	}
}
