package statuspatch

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// For returns the merge patch from before to after, after the outcome
// conditions of after's status are brought in line with its phase
// (lifecycle.SetOutcomeConditions). A merge patch carries the conditions as
// one list, so one that changes them is sent with after's resourceVersion:
// from a stale copy it conflicts rather than overwrite a newer writer's
// conditions. Without such a change the patch carries only the field the
// caller set, and needs no lock.
func For(before, after *tetherv1.WorkerBinding) client.Patch {
	if lifecycle.SetOutcomeConditions(&after.Status, after.Generation) {
		return client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	}
	return client.MergeFrom(before)
}
