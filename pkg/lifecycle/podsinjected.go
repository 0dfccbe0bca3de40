package lifecycle

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// PodsInjectedCondition tells whether the job's bound trainer pods (every
// node's, or node 0's with nodes=primary) carry the sidecar. A pod that
// existed before the job was bound runs without it; the binding says so and
// names the pods, never half-binds.
func PodsInjectedCondition(pods []corev1.Pod, nodes string) metav1.Condition {
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
			Message: fmt.Sprintf("trainer pod(s) %s run without the Tether sidecar: their pod template was not routed to Tether "+
				"(the job was bound after its JobSet started, or a pod came from a template Tether did not see); deleting them or a plain "+
				"suspend and resume recreates them from the same template. Suspend the TrainJob (spec.suspend: true), then update it while "+
				"it is suspended (e.g. kubectl annotate trainjob %s tether.dev/routed=1 --overwrite) so that Tether routes it, then resume it "+
				"(docs/platform.md#pods-without-the-sidecar)", joinBounded(missing, 5), trainJobOf(pods))}
	case len(injected) > 0:
		return metav1.Condition{Type: tetherv1.ConditionPodsInjected, Status: metav1.ConditionTrue, Reason: tetherv1.ReasonPodsInjected,
			Message: "sidecar injected into " + joinBounded(injected, 5)}
	default:
		return metav1.Condition{Type: tetherv1.ConditionPodsInjected, Status: metav1.ConditionUnknown, Reason: tetherv1.ReasonNoPods,
			Message: "no running trainer pod yet"}
	}
}

// trainJobOf is the TrainJob of the pods, or a placeholder.
func trainJobOf(pods []corev1.Pod) string {
	for i := range pods {
		if name, ok := trainjob.IsTrainerPod(&pods[i]); ok {
			return name
		}
	}
	return "NAME"
}

// joinBounded joins at most n names, counting the rest: a condition message
// of a 256-node job stays short.
func joinBounded(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
