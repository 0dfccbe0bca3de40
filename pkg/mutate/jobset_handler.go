package mutate

import (
	"context"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// JobSetHandler serves the JobSet webhook: it puts RouteLabel on the trainer
// pod template of JobSets that carry it (routing.go). Its objectSelector
// limits it to those JobSets, so its outage only holds bound jobs.
type JobSetHandler struct{}

var _ admission.Handler = (*JobSetHandler)(nil)

// Handle implements admission.Handler.
func (h *JobSetHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	var obj jobSetRouting
	if err := decodeObject(req.Object.Raw, &obj); err != nil {
		jobSetAdmissions.WithLabelValues("denied").Inc()
		return admission.Errored(http.StatusBadRequest, err)
	}
	var old *jobSetRouting
	if req.Operation == admissionv1.Update {
		old = &jobSetRouting{}
		if err := decodeObject(req.OldObject.Raw, old); err != nil {
			jobSetAdmissions.WithLabelValues("denied").Inc()
			return admission.Errored(http.StatusBadRequest, err)
		}
	}
	ops := routeJobSet(&obj, old)
	if len(ops) == 0 {
		jobSetAdmissions.WithLabelValues("unchanged").Inc()
		return admission.Allowed("")
	}
	jobSetAdmissions.WithLabelValues("labeled").Inc()
	logf.FromContext(ctx).V(1).Info("routed JobSet's trainer pods to the pod webhook", "jobset", req.Namespace+"/"+req.Name)
	return admission.Patched("", ops...)
}
