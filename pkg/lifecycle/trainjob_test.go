package lifecycle

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// TestTrainJobOf pins the precedence both the binding server and the
// controller rely on: the owner's identity first, its deletion second.
func TestTrainJobOf(t *testing.T) {
	now := metav1.Now()
	tj := func(uid types.UID, terminating bool) *metav1.PartialObjectMetadata {
		o := &metav1.PartialObjectMetadata{}
		o.UID = uid
		if terminating {
			o.DeletionTimestamp = &now
		}
		return o
	}
	for _, c := range []struct {
		name  string
		owner types.UID
		tj    *metav1.PartialObjectMetadata
		want  TrainJobState
	}{
		{"owner live", "a", tj("a", false), TrainJobLive},
		{"owner terminating", "a", tj("a", true), TrainJobTerminating},
		{"none of that name", "a", nil, TrainJobMissing},
		{"another TrainJob of that name", "a", tj("b", false), TrainJobMissing},
		{"another TrainJob of that name, terminating", "a", tj("b", true), TrainJobMissing},
		// The case the two callers used to disagree on: a binding the
		// collector orphaned while its TrainJob waits on the orphan
		// finalizer.
		{"orphaned, the original terminating", "", tj("a", true), TrainJobOrphaned},
		{"orphaned, a live TrainJob of that name", "", tj("a", false), TrainJobOrphaned},
		{"orphaned, none read", "", nil, TrainJobOrphaned},
	} {
		if got := TrainJobOf(c.owner, c.tj); got != c.want {
			t.Errorf("%s: TrainJobOf = %d, want %d", c.name, got, c.want)
		}
		if got, want := TrainJobOf(c.owner, c.tj).Gone(), c.want == TrainJobMissing || c.want == TrainJobOrphaned; got != want {
			t.Errorf("%s: Gone = %v, want %v", c.name, got, want)
		}
	}
}

func TestTrainJobOwner(t *testing.T) {
	wb := &tetherv1.WorkerBinding{}
	wb.Spec.TrainJobName = "llm"
	ref := func(kind, apiVersion, name string, uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{Kind: kind, APIVersion: apiVersion, Name: name, UID: uid}
	}
	gv := trainjob.GVK.GroupVersion().String()
	for _, c := range []struct {
		refs []metav1.OwnerReference
		want types.UID
	}{
		{nil, ""},
		{[]metav1.OwnerReference{ref(trainjob.GVK.Kind, gv, "llm", "u1")}, "u1"},
		{[]metav1.OwnerReference{ref(trainjob.GVK.Kind, gv, "other", "u1")}, ""},
		{[]metav1.OwnerReference{ref("JobSet", gv, "llm", "u1")}, ""},
		{[]metav1.OwnerReference{ref(trainjob.GVK.Kind, "trainer.kubeflow.org/v0", "llm", "u1")}, ""},
		{[]metav1.OwnerReference{ref("JobSet", gv, "llm", "u0"), ref(trainjob.GVK.Kind, gv, "llm", "u2")}, "u2"},
	} {
		wb.OwnerReferences = c.refs
		if got := TrainJobOwner(wb); got != c.want {
			t.Errorf("owners %v: TrainJobOwner = %q, want %q", c.refs, got, c.want)
		}
	}
}
