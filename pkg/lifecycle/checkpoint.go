package lifecycle

import (
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// CheckpointReported records node rank's newest verified checkpoint as the
// job's: node 0's, as its progress is. A report older than the recorded one
// (a replica's memory behind another's write) changes nothing; a newer one
// replaces it even at a lower step (a trainer that restarted from scratch
// writes its checkpoints anew). It reports whether anything changed.
func CheckpointReported(st *tetherv1.WorkerBindingStatus, rank int32, podUID string, cp *tetherv1.CheckpointStatus) bool {
	if cp == nil || rank != 0 || IsFinal(st.Phase) || current(st, rank, podUID) == nil {
		return false
	}
	have := st.LastCheckpoint
	switch {
	case have == nil:
	case have.Time.After(cp.Time.Time):
		return false
	case have.Path == cp.Path && have.Step == cp.Step && have.Files == cp.Files && have.Bytes == cp.Bytes && have.Time.Equal(&cp.Time):
		return false
	}
	st.LastCheckpoint = cp.DeepCopy()
	return true
}
