package tuning

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/tether-dev/tether/pkg/trainjob"
)

// CacheTransform trims every object before the manager's cache stores it to
// what the control plane reads of it there:
//
//   - no managedFields: nothing reads them;
//   - of an object cached as metadata only (TrainJobs, for the pod webhook,
//     the binding server and the orphan and trainer-status controllers), no
//     kubectl last-applied-configuration, a copy of the whole object on
//     every TrainJob applied with kubectl;
//   - of a TrainJob cached whole (the binding controller's watch, which has
//     no label selector, so every TrainJob of the cluster is held): its
//     metadata, likewise without last-applied-configuration, and of its
//     status the conditions alone, all observe reads of it
//     (trainjob.Conditions). Its spec, with the trainer's command,
//     environment and pod overrides, would otherwise be held twice per job.
//
// Nothing writes an object from a cached copy of it, and what else is read
// of a TrainJob (its JobSet, status.trainerStatus) is read live. The object
// is the decoder's, not shared yet, so it is trimmed in place; trimming is
// idempotent, as a cache transform must be.
func CacheTransform() toolscache.TransformFunc {
	stripManagedFields := cache.TransformStripManagedFields()
	return func(in any) (any, error) {
		in, err := stripManagedFields(in)
		if err != nil {
			return in, err
		}
		switch o := in.(type) {
		case *metav1.PartialObjectMetadata:
			delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
		case *unstructured.Unstructured:
			if o.GroupVersionKind() == trainjob.GVK {
				trimTrainJob(o)
			}
		}
		return in, nil
	}
}

// trimTrainJob keeps apiVersion, kind, metadata (without
// last-applied-configuration) and status.conditions.
func trimTrainJob(o *unstructured.Unstructured) {
	kept := map[string]any{}
	for _, k := range []string{"apiVersion", "kind", "metadata"} {
		if v, ok := o.Object[k]; ok {
			kept[k] = v
		}
	}
	if conds, ok, _ := unstructured.NestedFieldNoCopy(o.Object, "status", "conditions"); ok {
		kept["status"] = map[string]any{"conditions": conds}
	}
	o.Object = kept
	if md, ok := kept["metadata"].(map[string]any); ok {
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, corev1.LastAppliedConfigAnnotation)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	}
}
