package controller

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// podsInjectedCondition tells whether the job's bound trainer pods (every
// node's, or node 0's with nodes=primary) carry the sidecar. A pod that
// existed before the job was bound runs without it; the binding says so and
// names the pods, never half-binds.
func podsInjectedCondition(pods []corev1.Pod, nodes string) metav1.Condition {
	var missing, injected []string
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if nodes == jobconfig.NodesPrimary && !trainjob.IsPrimaryNode(p) {
			continue
		}
		// The container, not the annotation: a copied tether.dev/status is no sidecar.
		if !trainjob.IsInjected(p) {
			missing = append(missing, p.Name)
		} else {
			injected = append(injected, p.Name)
		}
	}
	sort.Strings(missing)
	sort.Strings(injected)
	switch {
	case len(missing) > 0:
		return metav1.Condition{Type: tetherv1.ConditionPodsInjected, Status: metav1.ConditionFalse, Reason: tetherv1.ReasonPodsNotInjected,
			Message: fmt.Sprintf("trainer pod(s) %s were created before the job was bound and run without the Tether sidecar; "+
				"the job cannot be bound until they are recreated (delete them, or suspend and resume the TrainJob)", joinBounded(missing, 5))}
	case len(injected) > 0:
		return metav1.Condition{Type: tetherv1.ConditionPodsInjected, Status: metav1.ConditionTrue, Reason: tetherv1.ReasonPodsInjected,
			Message: "sidecar injected into " + joinBounded(injected, 5)}
	default:
		return metav1.Condition{Type: tetherv1.ConditionPodsInjected, Status: metav1.ConditionUnknown, Reason: tetherv1.ReasonNoPods,
			Message: "no running trainer pod yet"}
	}
}

// joinBounded joins at most n names, counting the rest: a condition message
// of a 256-node job stays short.
func joinBounded(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// equalStatus compares statuses ignoring condition transition times, which
// SetStatusCondition keeps when a condition's status did not change.
func equalStatus(a, b *tetherv1.WorkerBindingStatus) bool {
	return equality.Semantic.DeepEqual(a, b)
}
