package lifecycle

import tetherv1 "github.com/tether-dev/tether/api/v1alpha1"

// ReasonTrainJobDeleted fails a binding whose TrainJob is gone while the
// binding itself was left behind (deleted with --cascade=orphan, or not yet
// collected after a background delete).
const ReasonTrainJobDeleted = "TrainJobDeleted"

// TrainJobDeleted ends a binding whose TrainJob no longer exists. A final
// binding keeps its verdict. It reports whether anything changed.
func TrainJobDeleted(st *tetherv1.WorkerBindingStatus, msg string) bool {
	return finish(st, tetherv1.PhaseFailed, ReasonTrainJobDeleted, msg)
}
