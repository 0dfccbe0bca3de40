package tuning

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/pkg/trainjob"
)

func TestCacheTransformKeepsWhatIsReadOfATrainJob(t *testing.T) {
	conds := []any{map[string]any{"type": trainjob.ConditionSuspended, "status": "True", "reason": "Queued", "message": "m",
		"lastTransitionTime": "2026-01-01T00:00:00Z"}}
	tj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": trainjob.GVK.GroupVersion().String(), "kind": trainjob.GVK.Kind,
		"metadata": map[string]any{"name": "j", "namespace": "ns", "uid": "u1", "labels": map[string]any{"tether.dev/bind": "true"},
			"annotations":   map[string]any{"tether.dev/job-id": "id", corev1.LastAppliedConfigAnnotation: `{"spec":{}}`},
			"managedFields": []any{map[string]any{"manager": "kubectl"}}},
		"spec":   map[string]any{"trainer": map[string]any{"image": "x", "command": []any{"python"}}},
		"status": map[string]any{"conditions": conds, "jobsStatus": []any{map[string]any{"name": "node"}}, "trainerStatus": map[string]any{"progressPercentage": int64(5)}},
	}}
	out, err := CacheTransform()(tj)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*unstructured.Unstructured)
	want := map[string]any{
		"apiVersion": trainjob.GVK.GroupVersion().String(), "kind": trainjob.GVK.Kind,
		"metadata": map[string]any{"name": "j", "namespace": "ns", "uid": "u1", "labels": map[string]any{"tether.dev/bind": "true"},
			"annotations": map[string]any{"tether.dev/job-id": "id"}},
		"status": map[string]any{"conditions": conds},
	}
	if !reflect.DeepEqual(got.Object, want) {
		t.Fatalf("trimmed TrainJob:\n%v\nwant\n%v", got.Object, want)
	}
	if c := trainjob.Conditions(got); len(c) != 1 || c[0].Type != trainjob.ConditionSuspended || c[0].Status != metav1.ConditionTrue {
		t.Errorf("conditions read from the trimmed TrainJob: %+v", c)
	}
	again, err := CacheTransform()(got)
	if err != nil || !reflect.DeepEqual(again.(*unstructured.Unstructured).Object, want) {
		t.Errorf("transform not idempotent: %v, %v", again, err)
	}
}

func TestCacheTransformLeavesOtherUnstructuredWhole(t *testing.T) {
	js := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": "j", "annotations": map[string]any{corev1.LastAppliedConfigAnnotation: "{}"}},
		"spec":     map[string]any{"replicatedJobs": []any{}}}}
	out, err := CacheTransform()(js.DeepCopy())
	if err != nil || !reflect.DeepEqual(out.(*unstructured.Unstructured).Object, js.Object) {
		t.Errorf("a JobSet was changed: %v, %v", out, err)
	}
}

func TestCacheTransformTrimsMetadataOnlyObjects(t *testing.T) {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "j",
		Annotations:   map[string]string{"tether.dev/job-id": "id", corev1.LastAppliedConfigAnnotation: "{}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := CacheTransform()(m)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*metav1.PartialObjectMetadata)
	if got.ManagedFields != nil || !reflect.DeepEqual(got.Annotations, map[string]string{"tether.dev/job-id": "id"}) {
		t.Errorf("managedFields %v, annotations %v", got.ManagedFields, got.Annotations)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	if out, _ := CacheTransform()(pod); out.(*corev1.Pod).ManagedFields != nil {
		t.Error("a pod's managedFields were kept")
	}
}
