package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// createFailureRecheck is how often a binding whose admitted job has no
// trainer pod looks again for the Job's FailedCreate Events.
const createFailureRecheck = 15 * time.Second

// createFailureFirstLook is how old a binding is when the controller first
// looks for FailedCreate Events: the Job controller reports a refused pod
// within a second or two of the Job's creation, which follows the binding.
const createFailureFirstLook = 5 * time.Second

// createFailure finds why the TrainJob's trainer Jobs cannot create their
// pods: the newest FailedCreate Event of a Job of its trainer replicated
// job (<trainjob>-node-<i>), as the Job controller records it when Pod
// Security, a ResourceQuota or a webhook refuses a pod. It returns "" when
// there is none. Events are read uncached, only for such a binding, and at
// most 100 of the namespace's FailedCreate Events.
func (r *BindingReconciler) createFailure(ctx context.Context, tj *unstructured.Unstructured) (string, error) {
	if r.Live == nil {
		return "", nil
	}
	var list corev1.EventList
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "Job"), fields.OneTermEqualSelector("reason", "FailedCreate"))
	if err := r.Live.List(ctx, &list, client.InNamespace(tj.GetNamespace()), client.MatchingFieldsSelector{Selector: sel}, client.Limit(100)); err != nil {
		return "", err
	}
	prefix := tj.GetName() + "-" + trainjob.TrainerReplicatedJob + "-"
	var newest *corev1.Event
	for i := range list.Items {
		e := &list.Items[i]
		if !strings.HasPrefix(e.InvolvedObject.Name, prefix) {
			continue
		}
		if newest == nil || eventTime(e).After(eventTime(newest)) {
			newest = e
		}
	}
	if newest == nil {
		return "", nil
	}
	count := max(newest.Count, 1)
	if newest.Series != nil {
		count = max(count, newest.Series.Count)
	}
	return fmt.Sprintf("Job %s cannot create its pods (FailedCreate x%d, last at %s): %s", newest.InvolvedObject.Name, count,
		eventTime(newest).UTC().Format(time.RFC3339), newest.Message), nil
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// waitsForPods reports whether the binding waits for its first pod of an
// admitted job (Pending, not suspended or preempted) and none exists.
func waitsForPods(st *tetherv1.WorkerBindingStatus, pods []corev1.Pod) bool {
	if st.Phase != tetherv1.PhasePending || st.Attempt > 0 {
		return false
	}
	switch st.Reason {
	case tetherv1.ReasonSuspended, tetherv1.ReasonPreempted:
		return false
	}
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			return false
		}
	}
	return true
}
