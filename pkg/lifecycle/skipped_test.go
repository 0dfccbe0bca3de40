package lifecycle

import (
	"fmt"
	"strings"
	"testing"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

func TestMissingArtifactsNamesTheCauseWithoutFiles(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Artifacts: &tetherv1.ArtifactsStatus{
		LastError: `manifest not uploaded: PUT job/manifest.json: 503 SlowDown`}}
	got := MissingArtifacts(st)
	if !strings.Contains(got, "no manifest was uploaded") || !strings.Contains(got, "503 SlowDown") {
		t.Errorf("MissingArtifacts = %q, want the worker's error named", got)
	}
	if got := MissingArtifacts(&tetherv1.WorkerBindingStatus{}); !strings.Contains(got, "no upload error") {
		t.Errorf("MissingArtifacts without any report = %q, want it to say the worker reported nothing", got)
	}
}

func TestSkippedReportedIsBounded(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning}
	var entries []binding.SkippedEntry
	for i := range 8 {
		entries = append(entries, binding.SkippedEntry{Path: fmt.Sprintf("link-%d", i), Reason: "symlink to /etc (outside the artifact directory); never followed"})
	}
	if !SkippedReported(st, entries, 8) {
		t.Fatal("first report did not change the status")
	}
	a := st.Artifacts
	if len(a.Skipped) != binding.MaxReportedSkipped || a.SkippedCount != 8 || a.Skipped[0] != "link-0: symlink to /etc (outside the artifact directory); never followed" {
		t.Errorf("skipped %q count %d, want the first %d of 8", a.Skipped, a.SkippedCount, binding.MaxReportedSkipped)
	}
	if SkippedReported(st, entries, 8) {
		t.Error("the same report changed the status again")
	}
	if !SkippedReported(st, nil, 0) || st.Artifacts.Skipped != nil || st.Artifacts.SkippedCount != 0 {
		t.Errorf("an empty report did not clear the list: %+v", st.Artifacts)
	}
	if SkippedReported(&tetherv1.WorkerBindingStatus{}, nil, 0) {
		t.Error("an empty report on a binding without artifacts status changed it")
	}
}
