package trainjob

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// GVK is Kubeflow Trainer's TrainJob; every Trainer v2 release serves it as v1alpha1.
var GVK = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}

// Condition types Trainer sets on a TrainJob.
const (
	ConditionSuspended = "Suspended"
	ConditionComplete  = "Complete"
	ConditionFailed    = "Failed"
)

// New returns an empty TrainJob object for reads and watches.
func New() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	return u
}

// Get reads a TrainJob.
func Get(ctx context.Context, r client.Reader, key types.NamespacedName) (*unstructured.Unstructured, error) {
	u := New()
	return u, r.Get(ctx, key, u)
}

// Conditions returns status.conditions; malformed entries are skipped.
func Conditions(u *unstructured.Unstructured) []metav1.Condition {
	raw, found, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if !found || err != nil {
		return nil
	}
	out := make([]metav1.Condition, 0, len(raw))
	for _, item := range raw {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
			out = append(out, c)
		}
	}
	return out
}
