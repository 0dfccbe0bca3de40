package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/pkg/trainjob"
)

// testSidecar is the control plane's sidecar configuration in every pod case.
var testSidecar = SidecarConfig{
	Image:     "ghcr.io/tether-dev/tether-sidecar:v0.1.0",
	ServerURL: "https://tether-control-plane.tether-system.svc:8443",
	Resources: DefaultSidecarResources(),
}

// podExpectation is what the golden files cannot show about a pod case: the
// decision's reason (a skipped pod's golden is just its input) and the
// warnings returned to the API client.
type podExpectation struct {
	reason Reason
	// warning is a substring of the response's only warning; "" means no warnings.
	warning string
}

// podCases lists every case in testdata/pod; a case missing here, or an entry
// without a case, fails the test.
var podCases = map[string]podExpectation{
	"unbound-trainjob":           {reason: SkipNotBound},
	"no-trainjob":                {reason: SkipNoTrainJob},
	"injected-default":           {reason: ReasonInjected},
	"long-grace-period":          {reason: ReasonInjected},
	"already-injected":           {reason: SkipAlreadyInjected},
	"already-injected-defaulted": {reason: SkipAlreadyInjected},
	// A pod that merely looks injected (names and annotation a user can
	// write, over a sidecar Tether did not render).
	"fake-sidecar-sleep":                {reason: DenyStaleInjection},
	"fake-sidecar-other-image":          {reason: DenyStaleInjection},
	"fake-sidecar-other-token-secret":   {reason: DenyStaleInjection},
	"fake-sidecar-extra-tether-env":     {reason: DenyStaleInjection},
	"fake-sidecar-other-pod-token":      {reason: DenyStaleInjection},
	"initializer-pod":                   {reason: SkipNotTrainerPod},
	"primary-scope-node-1":              {reason: SkipNotPrimaryNode},
	"node-rank-1":                       {reason: ReasonInjected},
	"node-rank-beyond-limit":            {reason: DenyNodeRank},
	"artifact-volume-at-path":           {reason: ReasonInjected},
	"artifact-volume-parent":            {reason: ReasonInjected},
	"artifact-volume-subpath":           {reason: ReasonInjected},
	"artifact-path-contains-mount":      {reason: ReasonInjected},
	"artifact-path-in-configmap":        {reason: DenyArtifactMount},
	"artifact-mount-subpathexpr":        {reason: DenyArtifactMount},
	"artifact-nested-mounts":            {reason: ReasonInjected},
	"artifact-parent-and-nested-mount":  {reason: ReasonInjected},
	"artifact-nested-mount-subpathexpr": {reason: DenyArtifactMount},
	"custom-settings":                   {reason: ReasonInjected},
	"custom-trainer-container":          {reason: ReasonInjected},
	"other-native-sidecar":              {reason: ReasonInjected},
	"host-network-cluster-first": {reason: ReasonInjected,
		warning: `pod uses hostNetwork with dnsPolicy "ClusterFirst": the sidecar cannot resolve cluster Service names`},
	"host-network-cluster-first-with-host-net": {reason: ReasonInjected},
	"missing-trainer-container":                {reason: DenyNoTrainerContainer},
	"sidecar-image-override":                   {reason: ReasonInjected},
	"sidecar-resources":                        {reason: ReasonInjected},
	"sidecar-resources-over-limit":             {reason: DenyInvalidSettings},
	"missing-identity":                         {reason: DenyMissingIdentity},
	"no-service-account":                       {reason: DenyNoServiceAccount},
	"invalid-settings":                         {reason: DenyInvalidSettings},
	"token-volume-conflict":                    {reason: DenyNameConflict},
	"sidecar-name-conflict":                    {reason: DenyNameConflict},
	"status-annotation-without-sidecar": {reason: ReasonInjected,
		warning: `replaced annotation tether.dev/status, which was not this job's injection (tether.dev/status is set but the pod has no tether-sidecar init container)`},
	"stale-injection-other-job": {reason: DenyStaleInjection},
	// Kueue mode: the runtime declares the sidecar.
	"declared-sidecar":                    {reason: ReasonInjected},
	"declared-sidecar-annotations-repeat": {reason: ReasonInjected},
	"declared-sidecar-resources-conflict": {reason: DenySidecarResources},
	"declared-sidecar-malformed":          {reason: DenySidecarDeclaration},
	"declared-sidecar-not-native":         {reason: DenySidecarDeclaration},
	"declared-sidecar-env-clash":          {reason: DenySidecarDeclaration},
}

// TestPodWebhookGolden runs testdata/pod through PodHandler.
func TestPodWebhookGolden(t *testing.T) {
	dir := goldenDir{dir: "testdata/pod", optional: []string{".trainjob.yaml"}}
	names := dir.cases(t)
	for name := range podCases {
		if !slices.Contains(names, name) {
			t.Errorf("podCases lists %q, but there is no %s", name, dir.path(name, inSuffix))
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			want, ok := podCases[name]
			if !ok {
				t.Fatalf("add %q to podCases with the decision's reason", name)
			}
			in := readJSON(t, dir.path(name, inSuffix))
			checkPodDecodes(t, in)
			h := &PodHandler{
				Injector:  PodInjector{Sidecar: testSidecar},
				TrainJobs: readTrainJob(t, dir.path(name, ".trainjob.yaml")),
			}

			resp, got := admitPod(t, h, in)
			if got.Reason != want.reason {
				t.Errorf("decision %s/%s, want reason %s", got.Outcome, got.Reason, want.reason)
			}
			checkWarnings(t, resp.Warnings, want.warning)
			if !resp.Allowed {
				if got.Outcome != OutcomeDenied {
					t.Errorf("denied, but the decision was %s", got.Outcome)
				}
				dir.check(t, name, deniedWith(resp.Result.Message))
				return
			}
			out := applyPatch(t, in, resp)
			switch got.Outcome {
			case OutcomeSkipped:
				if resp.Result.Message != string(got.Reason) {
					t.Errorf("skip response message %q, want the reason %q", resp.Result.Message, got.Reason)
				}
				if len(resp.Patch) != 0 {
					t.Errorf("skipped pod patched: %s", resp.Patch)
				}
			case OutcomePatched:
				if len(resp.Patch) == 0 {
					t.Error("injected, but the response has no patch")
				}
				checkInjectionPatch(t, resp.Patch, declaredIndex(t, in))
			default:
				t.Errorf("allowed, but the decision was %s", got.Outcome)
			}
			golden := toYAML(t, out)
			if got.Outcome == OutcomeSkipped && !bytes.Equal(golden, toYAML(t, in)) {
				t.Errorf("a skipped pod must come out as it went in:\n%s", unifiedDiff("input", "output", toYAML(t, in), golden))
			}
			dir.check(t, name, admitted(golden))

			// Re-invocation, or a pod created from the injected spec: unchanged.
			again, _ := admitPod(t, h, out)
			checkIdempotent(t, again)
			if len(again.Warnings) != 0 {
				t.Errorf("second admission warns again: %q", again.Warnings)
			}
		})
	}
}

// TestPodWebhookTrainJobLookupFails: without the TrainJob the webhook cannot
// tell a bound job's pod from another, so it denies rather than admit a bound
// pod without its sidecar.
func TestPodWebhookTrainJobLookupFails(t *testing.T) {
	h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: failingReader{}}
	in := readJSON(t, "testdata/pod/injected-default.in.yaml")
	resp, got := admitPod(t, h, in)
	if resp.Allowed || got.Reason != DenyTrainJobLookup {
		t.Fatalf("allowed=%v reason=%s, want denied with %s", resp.Allowed, got.Reason, DenyTrainJobLookup)
	}
	const want = "Tether could not read TrainJob ml-team/llama-finetune: cache not synced; the Job controller will retry"
	if resp.Result.Message != want {
		t.Errorf("message %q, want %q", resp.Result.Message, want)
	}
}

// admitPod admits a pod CREATE and returns the response with the decision the
// handler counted in tether_pod_admissions_total (tests here run serially).
func admitPod(t *testing.T, h *PodHandler, pod []byte) (admission.Response, Decision) {
	t.Helper()
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(pod, &meta); err != nil {
		t.Fatal(err)
	}
	before := podDecisionCounts(t)
	resp := admit(t, h, admissionv1.AdmissionRequest{
		UID:       types.UID("pod-request"),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Name:      meta.Name, // empty at CREATE with generateName, as the API server sends it
		Namespace: meta.Namespace,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: pod},
	})
	var decisions []Decision
	for k, n := range podDecisionCounts(t) {
		if n != before[k] {
			decisions = append(decisions, Decision{Outcome: Outcome(k[0]), Reason: Reason(k[1])})
		}
	}
	if len(decisions) != 1 {
		t.Fatalf("the handler counted %d decisions for one pod: %v", len(decisions), decisions)
	}
	return resp, decisions[0]
}

// podDecisionCounts reads tether_pod_admissions_total by (outcome, reason).
func podDecisionCounts(t *testing.T) map[[2]string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() { podAdmissions.Collect(ch); close(ch) }()
	counts := map[[2]string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		var k [2]string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "outcome":
				k[0] = l.GetValue()
			case "reason":
				k[1] = l.GetValue()
			}
		}
		counts[k] = d.GetCounter().GetValue()
	}
	return counts
}

func checkWarnings(t *testing.T, warnings []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(warnings) != 0:
		t.Errorf("unexpected warnings: %q", warnings)
	case want != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], want)):
		t.Errorf("warnings %q, want one containing %q", warnings, want)
	}
}

// checkPodDecodes rejects a pod input with a field corev1.Pod does not know,
// which is most likely a typo in the case. (The webhook keeps unknown fields,
// see TestPodPatchKeepsUnknownFields.)
func checkPodDecodes(t *testing.T, pod []byte) {
	t.Helper()
	if err := yaml.UnmarshalStrict(pod, &corev1.Pod{}); err != nil {
		t.Fatalf("input is not a valid v1 Pod: %v", err)
	}
}

// readTrainJob returns the reader the handler looks TrainJobs up in, serving
// the TrainJob in path, or none when the file does not exist.
func readTrainJob(t testing.TB, path string) client.Reader {
	t.Helper()
	j := readOptionalJSON(t, path)
	if j == nil {
		return oneTrainJob{}
	}
	tj := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(j, tj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if gvk := tj.GroupVersionKind(); gvk != trainjob.GVK {
		t.Fatalf("%s is a %s, want a %s", path, gvk, trainjob.GVK)
	}
	return oneTrainJob{tj}
}

// oneTrainJob stands in for the manager's metadata-only informer cache, which
// the PodHandler reads TrainJobs from in production: it serves Get of one
// TrainJob's metadata as *metav1.PartialObjectMetadata and answers NotFound
// for anything else. A real cache (or envtest) would add nothing to what these
// cases test: the handler only ever does this one Get.
type oneTrainJob struct{ obj *metav1.PartialObjectMetadata }

func (r oneTrainJob) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	pom, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return fmt.Errorf("test reader serves *metav1.PartialObjectMetadata only, got %T", obj)
	}
	if gvk := pom.GroupVersionKind(); gvk != trainjob.GVK {
		return fmt.Errorf("test reader serves %s only, got a Get for %s", trainjob.GVK, gvk)
	}
	if r.obj == nil || key.Namespace != r.obj.Namespace || key.Name != r.obj.Name {
		return apierrors.NewNotFound(schema.GroupResource{Group: trainjob.GVK.Group, Resource: "trainjobs"}, key.Name)
	}
	r.obj.DeepCopyInto(pom)
	return nil
}

func (oneTrainJob) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("test reader serves Get only")
}

// failingReader is a cache that cannot answer.
type failingReader struct{}

func (failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("cache not synced")
}

func (failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("cache not synced")
}
