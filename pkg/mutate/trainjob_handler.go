package mutate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/tether-dev/tether/pkg/jobconfig"
)

// TrainJobHandler serves the TrainJob webhook. It decodes metadata only, so
// it works on every Trainer version's TrainJob shape and never touches spec.
type TrainJobHandler struct {
	Mutator TrainJobMutator
	// Shapes tells how the installed Trainer labels a JobSet (routing.go).
	Shapes TrainerShapes
}

var _ admission.Handler = (*TrainJobHandler)(nil)

// Handle implements admission.Handler.
func (h *TrainJobHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := logf.FromContext(ctx).WithValues("trainjob", req.Namespace+"/"+req.Name)
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var obj, old metav1.PartialObjectMetadata
	var route trainJobRouting
	var oldRoute *trainJobRouting // nil at CREATE
	if err := errors.Join(decodeObject(req.Object.Raw, &obj), decodeObject(req.Object.Raw, &route)); err != nil {
		trainJobAdmissions.WithLabelValues("denied").Inc()
		return admission.Errored(http.StatusBadRequest, err)
	}
	var oldMeta *metav1.ObjectMeta // nil at CREATE
	if req.Operation == admissionv1.Update {
		oldRoute = &trainJobRouting{}
		if err := errors.Join(decodeObject(req.OldObject.Raw, &old), decodeObject(req.OldObject.Raw, oldRoute)); err != nil {
			trainJobAdmissions.WithLabelValues("denied").Inc()
			return admission.Errored(http.StatusBadRequest, err)
		}
		oldMeta = &old.ObjectMeta
	}
	add, err := h.Mutator.Stamp(ctx, &obj.ObjectMeta, oldMeta)
	if err != nil {
		trainJobAdmissions.WithLabelValues("denied").Inc()
		log.Info("denied TrainJob", "reason", err.Error())
		return admission.Denied(err.Error())
	}
	routeOps, warnings, err := h.route(ctx, &obj.ObjectMeta, &route, oldRoute)
	if err != nil {
		trainJobAdmissions.WithLabelValues("denied").Inc()
		log.Info("denied TrainJob", "reason", err.Error())
		return admission.Denied(err.Error())
	}
	if len(add) == 0 && len(routeOps) == 0 {
		trainJobAdmissions.WithLabelValues("unchanged").Inc()
		resp := admission.Allowed("")
		resp.Warnings = warnings
		return resp
	}
	trainJobAdmissions.WithLabelValues("stamped").Inc()
	log.V(1).Info("stamped TrainJob", "annotations", add, "routing", len(routeOps) > 0)
	var ops []jsonpatch.JsonPatchOperation
	switch {
	case len(add) == 0:
	case !hasMetadata(req.Object.Raw):
		// Never from the API server (its objects have a name), but a patch
		// must apply to the document it answers (FuzzTrainJobHandler).
		ops = []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata", Value: map[string]any{"annotations": add}}}
	default:
		ops = annotationPatch(obj.Annotations == nil, add)
	}
	resp := admission.Patched("", append(ops, routeOps...)...)
	resp.Warnings = warnings
	return resp
}

// route returns the spec patch that routes a bound job's trainer pods to the
// pod webhook (routing.go). A bound TrainJob whose Trainer shape is unknown is
// denied: admitted, its pods would bypass the pod webhook and run without the
// sidecar. A TrainJob being deleted is left alone, so that its finalizers can go.
func (h *TrainJobHandler) route(ctx context.Context, obj *metav1.ObjectMeta, route, old *trainJobRouting) ([]jsonpatch.JsonPatchOperation, []string, error) {
	bound := jobconfig.IsBound(obj.Labels)
	if obj.DeletionTimestamp != nil || h.Shapes == nil {
		return nil, nil, nil
	}
	shape, err := h.Shapes.Shape(ctx)
	switch {
	case err != nil && bound:
		return nil, nil, fmt.Errorf("Tether cannot bind this TrainJob yet: %w", err)
	case err != nil:
		return nil, nil, nil // unbinding: nothing to route
	}
	return routeTrainJob(shape, route, old, bound)
}

// hasMetadata: the object's JSON has a metadata object.
func hasMetadata(raw []byte) bool {
	var top struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	return decodeObject(raw, &top) == nil && top.Metadata != nil
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

// jsonPointerEscaper escapes a JSON pointer's reference token (RFC 6901);
// built once: a Replacer builds its lookup table on first use.
var jsonPointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func escapeJSONPointer(s string) string { return jsonPointerEscaper.Replace(s) }
