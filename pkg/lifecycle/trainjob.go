package lifecycle

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// ReasonTrainJobDeleted fails a binding whose TrainJob is gone while the
// binding itself was left behind (deleted with --cascade=orphan, or not yet
// collected after a background delete).
const ReasonTrainJobDeleted = "TrainJobDeleted"

// TrainJobDeleted ends a binding whose TrainJob no longer exists. A final
// binding keeps its verdict. It reports whether anything changed.
func TrainJobDeleted(st *tetherv1.WorkerBindingStatus, msg string) bool {
	return finish(st, tetherv1.PhaseFailed, ReasonTrainJobDeleted, msg)
}

// TrainJobState is what the TrainJob of a binding's name is to the binding:
// the one rule for "is the TrainJob gone", applied by the binding server
// (which refuses the token unless it is TrainJobLive) and by the controller
// (which finalizes a binding whose TrainJob is gone).
type TrainJobState int

const (
	// TrainJobLive: the TrainJob that owns the binding exists and is not
	// being deleted.
	TrainJobLive TrainJobState = iota
	// TrainJobTerminating: the TrainJob that owns the binding is being
	// deleted; it will be gone, and the binding with it or left behind.
	TrainJobTerminating
	// TrainJobMissing: no TrainJob of that name exists, or one exists that
	// is not the binding's owner (a new TrainJob of the same name).
	TrainJobMissing
	// TrainJobOrphaned: the binding has no owner and the TrainJob of its
	// name (if any) is not the one it was made for (BindingOwner): the
	// garbage collector removed its ownerReference for a --cascade=orphan
	// delete, and its TrainJob is gone.
	TrainJobOrphaned
)

// Gone reports whether the binding's TrainJob no longer exists as the
// binding's: deleted, or orphaned.
func (s TrainJobState) Gone() bool { return s == TrainJobMissing || s == TrainJobOrphaned }

// TrainJobOwner returns the UID of wb's TrainJob from its ownerReference,
// or "" if it has none (the TrainJob was deleted with --cascade=orphan and
// the garbage collector removed it).
func TrainJobOwner(wb *tetherv1.WorkerBinding) types.UID {
	for _, o := range wb.OwnerReferences {
		if o.Kind == trainjob.GVK.Kind && o.APIVersion == trainjob.GVK.GroupVersion().String() && o.Name == wb.Spec.TrainJobName {
			return o.UID
		}
	}
	return ""
}

// BindingOwner is the UID of wb's TrainJob: its ownerReference's
// (TrainJobOwner), or, for a binding without one, tj's when tj (the
// TrainJob of the binding's name, nil when there is none) is the TrainJob
// the binding was made for (MadeFor). An ownerReference is metadata, which
// a user holding patch on WorkerBindings (the orchestrator Role) could
// remove: its absence alone never says the TrainJob is gone.
func BindingOwner(wb *tetherv1.WorkerBinding, tj *metav1.PartialObjectMetadata) types.UID {
	if uid := TrainJobOwner(wb); uid != "" {
		return uid
	}
	if tj != nil && MadeFor(wb, tj) {
		return tj.UID
	}
	return ""
}

// MadeFor says whether wb was made for tj, a TrainJob of its name: tj is
// bound, carries the binding's job id and worker id (the worker id is
// generated per TrainJob, so a resubmission has another unless copied),
// and existed when the binding was created (the binding is created after
// its TrainJob; a TrainJob created later is another one).
func MadeFor(wb *tetherv1.WorkerBinding, tj *metav1.PartialObjectMetadata) bool {
	return tj.Name == wb.Spec.TrainJobName && tj.Namespace == wb.Namespace &&
		jobconfig.IsBound(tj.Labels) &&
		tj.Annotations[names.JobIDAnnotation] == wb.Spec.JobID && tj.Annotations[names.WorkerIDAnnotation] == wb.Spec.WorkerID &&
		!tj.CreationTimestamp.After(wb.CreationTimestamp.Time)
}

// TrainJobOf says what tj, the TrainJob of the binding's name (nil when
// there is none), is to a binding owned by owner (TrainJobOwner, or
// BindingOwner where the TrainJob is read for an ownerless binding too).
//
// Identity comes before the deletion state: only the binding's own TrainJob
// can be terminating for it; a TrainJob that is not its owner says only
// that the owner is gone, whatever its own state. With no owner the answer
// is TrainJobOrphaned whatever tj is, so a caller may pass nil without
// reading the TrainJob.
func TrainJobOf(owner types.UID, tj *metav1.PartialObjectMetadata) TrainJobState {
	switch {
	case owner == "":
		return TrainJobOrphaned
	case tj == nil || tj.UID != owner:
		return TrainJobMissing
	case tj.DeletionTimestamp != nil:
		return TrainJobTerminating
	}
	return TrainJobLive
}
