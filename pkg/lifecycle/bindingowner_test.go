package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// TestBindingOwner: an owner reference wins; without one, the TrainJob of
// the binding's name is its owner only when the binding was made for it,
// so a removed reference alone never makes a live TrainJob gone, and a
// later TrainJob of the same name is never taken for the first.
func TestBindingOwner(t *testing.T) {
	created := metav1.NewTime(time.Unix(1_800_000_000, 0))
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "llm", CreationTimestamp: created},
		Spec: tetherv1.WorkerBindingSpec{TrainJobName: "llm", JobID: "team_0123456789abcdef", WorkerID: "w-1"}}
	tj := func(mod func(*metav1.PartialObjectMetadata)) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "llm", UID: "tj-1",
			CreationTimestamp: metav1.NewTime(created.Add(-time.Second)),
			Labels:            map[string]string{names.BindLabel: names.BindValue},
			Annotations:       map[string]string{names.JobIDAnnotation: wb.Spec.JobID, names.WorkerIDAnnotation: wb.Spec.WorkerID}}}
		if mod != nil {
			mod(o)
		}
		return o
	}
	for _, c := range []struct {
		name  string
		refs  []metav1.OwnerReference
		tj    *metav1.PartialObjectMetadata
		want  types.UID
		state TrainJobState
	}{
		{"owner reference", []metav1.OwnerReference{{Kind: trainjob.GVK.Kind, APIVersion: trainjob.GVK.GroupVersion().String(), Name: "llm", UID: "tj-0"}},
			tj(nil), "tj-0", TrainJobMissing},
		{"reference removed, its TrainJob lives", nil, tj(nil), "tj-1", TrainJobLive},
		{"reference removed, created in the same second", nil, tj(func(o *metav1.PartialObjectMetadata) { o.CreationTimestamp = created }), "tj-1", TrainJobLive},
		{"orphaned by the collector, its TrainJob terminating", nil, tj(func(o *metav1.PartialObjectMetadata) { o.DeletionTimestamp = &created }), "tj-1", TrainJobTerminating},
		{"orphaned, none of that name", nil, nil, "", TrainJobOrphaned},
		{"orphaned, a later TrainJob of that name", nil, tj(func(o *metav1.PartialObjectMetadata) { o.CreationTimestamp = metav1.NewTime(created.Add(time.Second)) }), "", TrainJobOrphaned},
		{"orphaned, another worker id", nil, tj(func(o *metav1.PartialObjectMetadata) { o.Annotations[names.WorkerIDAnnotation] = "w-2" }), "", TrainJobOrphaned},
		{"orphaned, another job id", nil, tj(func(o *metav1.PartialObjectMetadata) { o.Annotations[names.JobIDAnnotation] = "other" }), "", TrainJobOrphaned},
		{"orphaned, an unbound TrainJob", nil, tj(func(o *metav1.PartialObjectMetadata) { o.Labels = nil }), "", TrainJobOrphaned},
	} {
		wb.OwnerReferences = c.refs
		got := BindingOwner(wb, c.tj)
		if got != c.want {
			t.Errorf("%s: BindingOwner = %q, want %q", c.name, got, c.want)
		}
		if s := TrainJobOf(got, c.tj); s != c.state {
			t.Errorf("%s: TrainJobOf = %d, want %d", c.name, s, c.state)
		}
	}
}
