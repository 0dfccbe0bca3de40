package mutate

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"
)

// seedJSON adds the JSON of every testdata file matching pattern as a seed.
func seedJSON(f *testing.F, pattern string, add func([]byte)) {
	paths, _ := filepath.Glob(pattern)
	for _, p := range paths {
		y, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		if j, err := yaml.YAMLToJSON(y); err == nil {
			add(j)
		}
	}
}

// decided fails unless resp is an allowed response whose patch applies to
// raw, or a denial (403) or an undecodable-input error (400) with a message.
func decided(t *testing.T, req admission.Request, resp admission.Response, raw []byte) []byte {
	t.Helper()
	if err := resp.Complete(req); err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed {
		if (resp.Result.Code != http.StatusForbidden && resp.Result.Code != http.StatusBadRequest) || resp.Result.Message == "" {
			t.Fatalf("neither allowed nor a clear refusal: %d %q", resp.Result.Code, resp.Result.Message)
		}
		if len(resp.Patch) != 0 {
			t.Fatalf("refusal carries a patch")
		}
		return nil
	}
	if len(resp.Patch) == 0 {
		return raw
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("undecodable patch %s: %v", resp.Patch, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", resp.Patch, err)
	}
	return out
}

// FuzzPodHandler: any pod the API server could send is allowed (with a
// patch that applies and yields a pod carrying the sidecar), denied with a
// message, or refused as undecodable; never a panic.
func FuzzPodHandler(f *testing.F) {
	seedJSON(f, "testdata/pod/*.in.yaml", func(j []byte) { f.Add(j) })
	f.Add([]byte(`{"metadata":{"labels":{"jobset.sigs.k8s.io/jobset-name":"train"}}}`))
	f.Add([]byte(`null`))
	tj := &metav1.PartialObjectMetadata{}
	raw, err := os.ReadFile("testdata/pod/injected-default.trainjob.yaml")
	if err != nil {
		f.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, tj); err != nil {
		f.Fatal(err)
	}
	h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: oneTrainJob{tj}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: tj.Namespace,
			Object: runtimeRaw(raw)}}
		resp := h.Handle(context.Background(), req)
		out := decided(t, req, resp, raw)
		if out == nil || len(resp.Patch) == 0 {
			return
		}
		var pod corev1.Pod
		if err := json.Unmarshal(out, &pod); err != nil {
			t.Fatalf("patched pod does not decode: %v", err)
		}
		found := false
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			found = found || c.Name == SidecarName
		}
		if !found {
			t.Fatalf("a patched pod without the sidecar: %s", resp.Patch)
		}
	})
}

// FuzzTrainJobHandler: any TrainJob (and previous version, on update) is
// allowed with a patch that applies, or refused with a message.
func FuzzTrainJobHandler(f *testing.F) {
	seedJSON(f, "testdata/trainjob/*.in.yaml", func(j []byte) { f.Add(j, []byte(nil)) })
	f.Add([]byte(`{"metadata":{"labels":{"tether.dev/bind":"true"},"annotations":{"tether.dev/heartbeat-interval":"0s"}}}`),
		[]byte(`{"metadata":{"labels":{"tether.dev/bind":"true"},"annotations":{"tether.dev/job-id":"a"}}}`))
	h := &TrainJobHandler{}
	f.Fuzz(func(t *testing.T, obj, old []byte) {
		op := admissionv1.Create
		if old != nil {
			op = admissionv1.Update
		}
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Operation: op, Namespace: "ml", Name: "train",
			Object: runtimeRaw(obj), OldObject: runtimeRaw(old)}}
		out := decided(t, req, h.Handle(context.Background(), req), obj)
		if out == nil {
			return
		}
		var m metav1.PartialObjectMetadata
		if err := json.Unmarshal(out, &m); err != nil && !strings.Contains(string(obj), "null") {
			t.Fatalf("patched TrainJob does not decode: %v", err)
		}
	})
}

func runtimeRaw(b []byte) runtime.RawExtension { return runtime.RawExtension{Raw: b} }
