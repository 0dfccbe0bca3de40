package mutate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/mutate/internal/codec"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// eventAction is the action of the pod webhook's Events.
const eventAction = "Inject"

// PodHandler serves the pod webhook.
type PodHandler struct {
	Injector PodInjector
	// TrainJobs reads TrainJob metadata, normally from the manager's
	// metadata-only cache.
	TrainJobs client.Reader
	// Live reads a TrainJob the cache does not have (yet) from the API
	// server; nil trusts the cache. Only pods of bound jobs reach the
	// webhook, so a miss is rare and worth one GET rather than a bound pod
	// admitted without its sidecar.
	Live client.Reader
	// Recorder records Events on the TrainJob; nil records none. Never used
	// on dryRun. Their notes are fixed (pod_events.go).
	Recorder events.EventRecorder

	// events are the Event budgets per TrainJob and reason.
	events podEventLimits
}

var _ admission.Handler = (*PodHandler)(nil)

// Handle implements admission.Handler: the plain path, through
// controller-runtime's decoding, which the golden tests take. The control
// plane serves the pod webhook with ServeHTTP, the same admission on the
// codec's fast path.
func (h *PodHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	var pod corev1.Pod
	if err := decodeObject(req.Object.Raw, &pod); err != nil {
		return undecodablePod(err)
	}
	return h.admit(ctx, &req.AdmissionRequest, &pod)
}

// ServeHTTP serves the pod webhook's AdmissionReviews on the codec's fast
// path (codec.ServePodReview), which decodes the review and its pod in one
// pass and then admits exactly as Handle does.
func (h *PodHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	codec.ServePodReview(w, r, h.admit, undecodablePod)
}

// undecodablePod answers a CREATE whose object is not a pod.
func undecodablePod(err error) admission.Response {
	podAdmissions.WithLabelValues(string(OutcomeDenied), string(DenyUndecodable)).Inc()
	return admission.Errored(http.StatusBadRequest, fmt.Errorf("the AdmissionReview's object is not a decodable Pod: %w", err))
}

// admit decides about a pod CREATE and, for a bound job's trainer pod, injects
// the sidecar into pod (decoded from req.Object) and returns the patch.
func (h *PodHandler) admit(ctx context.Context, req *admissionv1.AdmissionRequest, pod *corev1.Pod) admission.Response {
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	var before podSnapshot // the pod before Inject, which changes it in place
	var appended *sidecarInput
	trainJob, decision := h.lookup(ctx, pod)
	if decision == nil {
		var err error
		if before, err = snapshotPod(pod); err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		defer before.release()
		var d Decision
		d, appended = h.Injector.inject(pod, trainJob)
		decision = &d
	}
	podAdmissions.WithLabelValues(string(decision.Outcome), string(decision.Reason)).Inc()
	dryRun := req.DryRun != nil && *req.DryRun
	h.record(ctx, req, trainJob, pod, *decision, dryRun)

	switch decision.Outcome {
	case OutcomeDenied:
		return admission.Denied(decision.Message)
	case OutcomeSkipped:
		return admission.Allowed(string(decision.Reason))
	}
	// Not a diff of the raw request against the re-encoded pod: that would
	// remove every field our k8s.io/api version does not know.
	ops, err := injectionPatch(before, pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	var sidecar *codec.Container // nil: json.Marshal encodes it
	if c, ok := appended.container(); ok {
		sidecar = &c
	}
	resp, err := codec.Patched(ops, sidecar)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the patch: %w", err))
	}
	resp.Warnings = decision.Warnings
	return resp
}

// podSnapshot is what injectionPatch needs of the pod before Inject: the
// lengths of what Inject appends to, the annotations, and the whole pod in
// its protobuf encoding to prove that nothing else changed. Encoding it
// costs a fraction of the deep copy and reflective comparison it replaces
// (profiled in test/performance/admission).
type podSnapshot struct {
	encoded        codec.PodEncoding
	initContainers int
	volumes        int
	mounts         []int // per container
	annotations    map[string]string
	noAnnotations  bool
	// declared is the index of the sidecar the runtime declares (Kueue
	// mode; -1: none), declaredSidecar a copy of it as declared.
	declared        int
	declaredSidecar *corev1.Container
}

// release gives the snapshot's encoding back to the codec's pool; s is not
// used after.
func (s *podSnapshot) release() { s.encoded.Release() }

func snapshotPod(pod *corev1.Pod) (podSnapshot, error) {
	encoded, err := codec.EncodePod(pod)
	if err != nil {
		return podSnapshot{}, fmt.Errorf("encoding the pod before injection: %w", err)
	}
	s := podSnapshot{encoded: encoded, initContainers: len(pod.Spec.InitContainers), volumes: len(pod.Spec.Volumes),
		mounts: make([]int, len(pod.Spec.Containers)), annotations: maps.Clone(pod.Annotations), noAnnotations: pod.Annotations == nil}
	for k := range pod.Spec.Containers {
		s.mounts[k] = len(pod.Spec.Containers[k].VolumeMounts)
	}
	s.declared = declaredSidecar(pod)
	if s.declared >= 0 {
		s.declaredSidecar = pod.Spec.InitContainers[s.declared].DeepCopy()
	}
	return s, nil
}

// injectionPatch returns the JSON patch that adds to the pod as the API server
// sent it (before) what PodInjector.Inject appended to it, giving after: init
// containers, volumes, the containers' volume mounts and annotations. Every
// operation is an "add" of something new, but for the completion of a
// sidecar the runtime declares (Kueue mode), which changes that one init
// container field by field, never its resources. So the fields of the
// request that corev1.Pod does not know (a newer API server's) are kept as
// they are. It fails if after differs from before in any other way, which
// Inject never does.
func injectionPatch(before podSnapshot, after *corev1.Pod) ([]jsonpatch.JsonPatchOperation, error) {
	if len(after.Spec.Containers) != len(before.mounts) {
		return nil, fmt.Errorf("injection changed the number of containers from %d to %d", len(before.mounts), len(after.Spec.Containers))
	}
	var ops []jsonpatch.JsonPatchOperation
	if before.declared >= 0 {
		if before.declared >= len(after.Spec.InitContainers) {
			return nil, errors.New("injection removed the declared sidecar")
		}
		completion, err := completionOps(before.declared, before.declaredSidecar, &after.Spec.InitContainers[before.declared])
		if err != nil {
			return nil, err
		}
		ops = append(ops, completion...)
	}
	ops = appendOps(ops, "/spec/initContainers", before.initContainers, after.Spec.InitContainers)
	ops = appendOps(ops, "/spec/volumes", before.volumes, after.Spec.Volumes)
	for k := range after.Spec.Containers {
		ops = appendOps(ops, "/spec/containers/"+strconv.Itoa(k)+"/volumeMounts", before.mounts[k], after.Spec.Containers[k].VolumeMounts)
	}
	added, replaced := map[string]string{}, map[string]string{}
	for k, v := range after.Annotations {
		prev, had := before.annotations[k]
		switch {
		case !had:
			added[k] = v
		case prev != v:
			// Only the status annotation: a stale one is replaced (Inject).
			replaced[k] = v
		}
	}
	for k := range replaced {
		if k != names.PodStatusAnnotation {
			return nil, fmt.Errorf("injection changed annotation %s", k)
		}
	}
	if len(added) > 0 {
		ops = append(ops, annotationPatch(before.noAnnotations, added)...)
	}
	for _, k := range sortedKeys(replaced) {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "replace", Path: "/metadata/annotations/" + escapeJSONPointer(k), Value: replaced[k]})
	}

	// What is left of after without the additions (and with the declared
	// sidecar as declared) must be before. rest shares everything with after
	// but the slices and map it trims or replaces.
	rest := *after
	rest.Spec.InitContainers = after.Spec.InitContainers[:min(before.initContainers, len(after.Spec.InitContainers))]
	if before.declared >= 0 {
		rest.Spec.InitContainers = slices.Clone(rest.Spec.InitContainers)
		rest.Spec.InitContainers[before.declared] = *before.declaredSidecar
	}
	rest.Spec.Volumes = after.Spec.Volumes[:min(before.volumes, len(after.Spec.Volumes))]
	rest.Spec.Containers = slices.Clone(after.Spec.Containers)
	for k := range rest.Spec.Containers {
		c := &rest.Spec.Containers[k]
		c.VolumeMounts = c.VolumeMounts[:min(before.mounts[k], len(c.VolumeMounts))]
	}
	rest.Annotations = before.annotations
	if len(after.Annotations)-len(added) != len(before.annotations) {
		return nil, errors.New("injection removed annotations")
	}
	same, err := before.encoded.Encodes(&rest)
	if err != nil {
		return nil, fmt.Errorf("encoding the injected pod: %w", err)
	}
	if !same {
		return nil, errors.New("injection changed the pod beyond appending to its init containers, volumes, volume mounts and annotations " +
			"and completing a declared sidecar")
	}
	return ops, nil
}

// completionOps turns the declared sidecar (init container index) into the
// completed one: the difference of the two as JSON, at the container's path.
// Computed on the known fields only, so a field of the request that
// corev1.Container does not know stays as it was. The resources must not
// change: they are what Kueue counted.
func completionOps(index int, declared, completed *corev1.Container) ([]jsonpatch.JsonPatchOperation, error) {
	if !equality.Semantic.DeepEqual(declared.Resources, completed.Resources) {
		return nil, errors.New("completing the declared sidecar changed its resources")
	}
	from, err := json.Marshal(declared)
	if err != nil {
		return nil, err
	}
	to, err := json.Marshal(completed)
	if err != nil {
		return nil, err
	}
	ops, err := jsonpatch.CreatePatch(from, to)
	if err != nil {
		return nil, fmt.Errorf("completing the declared sidecar: %w", err)
	}
	// CreatePatch visits fields in map order: a stable sort by field keeps
	// the patch the same every time and each field's operations in order.
	field := func(path string) string { return strings.SplitN(path, "/", 3)[1] }
	sort.SliceStable(ops, func(a, b int) bool { return field(ops[a].Path) < field(ops[b].Path) })
	prefix := fmt.Sprintf("/spec/initContainers/%d", index)
	for k := range ops {
		ops[k].Path = prefix + ops[k].Path
	}
	return ops, nil
}

// appendOps adds the elements after has beyond the before it had to the JSON
// array at path: the whole array when it had none (the request may have no
// array there, or null), else one "add" at the end per element.
func appendOps[T any](ops []jsonpatch.JsonPatchOperation, path string, before int, after []T) []jsonpatch.JsonPatchOperation {
	switch {
	case len(after) <= before:
		return ops
	case before == 0:
		return append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: path, Value: after})
	}
	for _, v := range after[before:] {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: path + "/-", Value: v})
	}
	return ops
}

// lookup finds the pod's TrainJob. A returned decision short-circuits Inject.
func (h *PodHandler) lookup(ctx context.Context, pod *corev1.Pod) (*metav1.ObjectMeta, *Decision) {
	name, ok := trainjob.IsTrainerPod(pod)
	if !ok {
		return nil, nil
	}
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainjob.GVK)
	key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
	err := h.TrainJobs.Get(ctx, key, tj)
	if apierrors.IsNotFound(err) && h.Live != nil {
		err = h.Live.Get(ctx, key, tj)
	}
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
// The logger gets its values only when it logs: zap encodes them eagerly, a
// cost every admission paid for a line written only for denials. The Event's
// note is fixed by the decision's reason and rate-limited per TrainJob
// (pod_events.go): the review may not be the API server's.
func (h *PodHandler) record(ctx context.Context, req *admissionv1.AdmissionRequest, tj *metav1.ObjectMeta, pod *corev1.Pod, d Decision, dryRun bool) {
	log := logf.FromContext(ctx)
	switch {
	case d.Outcome == OutcomeDenied:
		podLog(log, req, pod, d).Info("denied trainer pod", "message", d.Message)
	case d.Outcome == OutcomePatched && log.V(1).Enabled():
		podLog(log, req, pod, d).V(1).Info("returned the sidecar patch")
	}
	if h.Recorder == nil || dryRun || tj == nil || d.Reason == SkipNotBound || d.Reason == SkipAlreadyInjected {
		return
	}
	// No "Injected" here: the pod may still be refused after this webhook
	// (InjectionReporter announces it once it exists). The warnings are
	// about the spec as submitted, true either way.
	eventType, note, ok := podEventNote(d, pod)
	if !ok {
		return
	}
	reason := d.Reason
	if d.Outcome == OutcomePatched {
		reason = ReasonInjectionWarning
	}
	if !h.events.allow(podEventKey{trainJob: tj.UID, reason: reason}, time.Now()) {
		return
	}
	h.Recorder.Eventf(trainjob.Ref(tj.Namespace, tj.Name, tj.UID), nil, eventType, string(reason), eventAction, "%s", note)
}

// podLog is log with the admission's identifying values.
func podLog(log logr.Logger, req *admissionv1.AdmissionRequest, pod *corev1.Pod, d Decision) logr.Logger {
	return log.WithValues("namespace", pod.Namespace, "pod", podName(pod), "outcome", d.Outcome, "reason", d.Reason,
		"requestID", req.UID, "user", req.UserInfo.Username)
}

// podName is the pod's name, or its generateName prefix at CREATE.
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

func sortStrings(s []string) { sort.Strings(s) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
