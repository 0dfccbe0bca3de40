package lifecycle

import (
	"slices"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// SkippedReported records what the worker's scan skipped by policy: up to
// binding.MaxReportedSkipped entries and how many in all. It reports whether
// anything changed; a final binding keeps what it last showed.
func SkippedReported(st *tetherv1.WorkerBindingStatus, entries []binding.SkippedEntry, count int) bool {
	if IsFinal(st.Phase) {
		return false
	}
	shown := make([]string, 0, min(len(entries), binding.MaxReportedSkipped))
	for _, e := range entries[:min(len(entries), binding.MaxReportedSkipped)] {
		shown = append(shown, e.String())
	}
	if len(shown) == 0 {
		shown = nil
	}
	a := st.Artifacts
	if a == nil {
		if count == 0 {
			return false
		}
		a = &tetherv1.ArtifactsStatus{}
		st.Artifacts = a
	}
	if slices.Equal(a.Skipped, shown) && int(a.SkippedCount) == count {
		return false
	}
	a.Skipped, a.SkippedCount = shown, int32(count)
	return true
}
