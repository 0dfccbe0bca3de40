package mutate

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TrainJobGVK is Kubeflow Trainer's TrainJob; every Trainer v2 release serves it
// as v1alpha1. Tether reads its metadata only.
var TrainJobGVK = schema.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}

// TrainJobRef is the reference Events about a TrainJob point at. It is built
// from metadata alone: Tether never decodes a TrainJob's spec.
func TrainJobRef(tj *metav1.ObjectMeta) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: TrainJobGVK.GroupVersion().String(), Kind: TrainJobGVK.Kind,
		Namespace: tj.Namespace, Name: tj.Name, UID: tj.UID}
}

// PodHandler serves the pod webhook.
type PodHandler struct {
	Injector PodInjector
	// TrainJobs reads TrainJob metadata, normally from the manager's
	// metadata-only cache.
	TrainJobs client.Reader
	// Recorder records Events on the TrainJob; nil records none. Never used on dryRun.
	Recorder events.EventRecorder
}

var _ admission.Handler = (*PodHandler)(nil)

// Handle implements admission.Handler.
func (h *PodHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		podAdmissions.WithLabelValues(string(OutcomeDenied), string(DenyUndecodable)).Inc()
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	trainJob, decision := h.lookup(ctx, &pod)
	if decision == nil {
		d := h.Injector.Inject(&pod, trainJob)
		decision = &d
	}
	podAdmissions.WithLabelValues(string(decision.Outcome), string(decision.Reason)).Inc()
	dryRun := req.DryRun != nil && *req.DryRun
	h.record(ctx, trainJob, &pod, *decision, dryRun)

	switch decision.Outcome {
	case OutcomeDenied:
		return admission.Denied(decision.Message)
	case OutcomeSkipped:
		return admission.Allowed(string(decision.Reason))
	}
	mutated, err := json.Marshal(&pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp := admission.PatchResponseFromRaw(req.Object.Raw, mutated)
	resp.Warnings = decision.Warnings
	return resp
}

// lookup finds the pod's TrainJob. A returned decision short-circuits Inject.
func (h *PodHandler) lookup(ctx context.Context, pod *corev1.Pod) (*metav1.ObjectMeta, *Decision) {
	name, ok := IsTrainerPod(pod)
	if !ok {
		return nil, nil
	}
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(TrainJobGVK)
	err := h.TrainJobs.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, tj)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		// Without the TrainJob we cannot tell a bound job's pod from another:
		// deny, and let the Job controller retry, rather than risk a bound pod
		// running without its sidecar.
		d := denied(DenyTrainJobLookup, "Tether could not read TrainJob "+pod.Namespace+"/"+name+": "+err.Error()+"; the Job controller will retry")
		return nil, &d
	}
	return &tj.ObjectMeta, nil
}

// record logs the decision and records an Event on the TrainJob for what a
// platform team needs to see. Unbound jobs' pods are counted, not announced.
func (h *PodHandler) record(ctx context.Context, tj *metav1.ObjectMeta, pod *corev1.Pod, d Decision, dryRun bool) {
	log := logf.FromContext(ctx).WithValues("namespace", pod.Namespace, "pod", podName(pod), "outcome", d.Outcome, "reason", d.Reason)
	switch {
	case d.Outcome == OutcomeDenied:
		log.Info("denied trainer pod", "message", d.Message)
	case d.Outcome == OutcomeInjected:
		log.V(1).Info("injected sidecar")
	}
	if h.Recorder == nil || dryRun || tj == nil || d.Reason == SkipNotBound || d.Reason == SkipAlreadyInjected {
		return
	}
	ref := TrainJobRef(tj)
	switch d.Outcome {
	case OutcomeInjected:
		h.Recorder.Eventf(ref, nil, corev1.EventTypeNormal, string(d.Reason), "Inject", "injected the Tether sidecar into pod %s", podName(pod))
		for _, w := range d.Warnings {
			h.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "InjectionWarning", "Inject", "pod %s: %s", podName(pod), w)
		}
	case OutcomeSkipped:
		h.Recorder.Eventf(ref, nil, corev1.EventTypeNormal, string(d.Reason), "Inject", "did not inject pod %s: %s", podName(pod), d.Message)
	case OutcomeDenied:
		h.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, string(d.Reason), "Inject", "denied pod %s: %s", podName(pod), d.Message)
	}
}

// podName is the pod's name, or its generateName prefix at CREATE.
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

func sortStrings(s []string) { sort.Strings(s) }
