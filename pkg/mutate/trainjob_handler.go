package mutate

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TrainJobHandler serves the TrainJob webhook. It decodes metadata only, so
// it works on every Trainer version's TrainJob shape and never touches spec.
type TrainJobHandler struct {
	Mutator TrainJobMutator
}

var _ admission.Handler = (*TrainJobHandler)(nil)

// Handle implements admission.Handler.
func (h *TrainJobHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx).WithValues("trainjob", req.Namespace+"/"+req.Name)
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var obj, old metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		trainJobAdmissions.WithLabelValues("denied").Inc()
		return admission.Errored(http.StatusBadRequest, err)
	}
	var oldMeta *metav1.ObjectMeta // nil at CREATE
	if req.Operation == admissionv1.Update {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			trainJobAdmissions.WithLabelValues("denied").Inc()
			return admission.Errored(http.StatusBadRequest, err)
		}
		oldMeta = &old.ObjectMeta
	}
	add, err := h.Mutator.Stamp(&obj.ObjectMeta, oldMeta)
	if err != nil {
		trainJobAdmissions.WithLabelValues("denied").Inc()
		log.Info("denied TrainJob", "reason", err.Error())
		return admission.Denied(err.Error())
	}
	if len(add) == 0 {
		trainJobAdmissions.WithLabelValues("unchanged").Inc()
		return admission.Allowed("")
	}
	trainJobAdmissions.WithLabelValues("stamped").Inc()
	log.V(1).Info("stamped TrainJob identity", "annotations", add)
	return admission.Patched("", annotationPatch(obj.Annotations == nil, add)...)
}

// annotationPatch adds annotations with JSON-patch operations on
// /metadata/annotations only: nothing else of the object is rewritten.
func annotationPatch(noAnnotations bool, add map[string]string) []jsonpatch.JsonPatchOperation {
	if noAnnotations {
		return []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata/annotations", Value: add}}
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sortStrings(keys)
	ops := make([]jsonpatch.JsonPatchOperation, 0, len(keys))
	for _, k := range keys {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/annotations/" + escapeJSONPointer(k), Value: add[k]})
	}
	return ops
}

func escapeJSONPointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
