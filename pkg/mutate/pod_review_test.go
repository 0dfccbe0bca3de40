package mutate

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// serveReview POSTs body to h.ServeHTTP and returns the status and the
// decoded AdmissionReview.
func serveReview(t *testing.T, h *PodHandler, contentType string, body []byte) (int, admissionv1.AdmissionReview) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/mutate-pod", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %s", err, rec.Body.Bytes())
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
		t.Fatalf("response %s: want an admission.k8s.io/v1 AdmissionReview with a response", rec.Body.Bytes())
	}
	return rec.Code, review
}

func reviewOf(t *testing.T, req admissionv1.AdmissionRequest) []byte {
	t.Helper()
	return mustJSON(t, admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
}

// TestPodServeHTTPMatchesHandle: for every golden pod case, the review the
// control plane serves (ServeHTTP, one decoding pass) carries exactly what
// Handle, which the golden tests check, returns.
func TestPodServeHTTPMatchesHandle(t *testing.T) {
	dir := goldenDir{dir: "testdata/pod", optional: []string{".trainjob.yaml"}}
	for _, name := range dir.cases(t) {
		t.Run(name, func(t *testing.T) {
			in := readJSON(t, dir.path(name, inSuffix))
			var meta metav1.PartialObjectMetadata
			if err := json.Unmarshal(in, &meta); err != nil {
				t.Fatal(err)
			}
			h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: readTrainJob(t, dir.path(name, ".trainjob.yaml"))}
			req := admissionv1.AdmissionRequest{
				UID: types.UID("uid-" + name), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: meta.Namespace,
				Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: in}, DryRun: ptr.To(true),
			}
			want := admit(t, h, req)
			status, got := serveReview(t, h, "application/json", reviewOf(t, req))
			if status != http.StatusOK {
				t.Fatalf("HTTP %d", status)
			}
			wantJSON, gotJSON := mustJSON(t, want.AdmissionResponse), mustJSON(t, got.Response)
			if !bytes.Equal(wantJSON, gotJSON) {
				t.Errorf("ServeHTTP answered\n%s\nHandle answered\n%s", gotJSON, wantJSON)
			}
		})
	}
}

// TestPodServeHTTPConcurrent: admissions served at once (sharing the
// sidecar templates, the settings cache and the pooled buffers) answer as
// one served alone. Run with -race.
func TestPodServeHTTPConcurrent(t *testing.T) {
	type admission struct {
		h    *PodHandler
		body []byte
		want []byte
	}
	var cases []admission
	for _, name := range []string{"injected-default", "artifact-nested-mounts", "custom-settings", "other-native-sidecar"} {
		in := readJSON(t, "testdata/pod/"+name+".in.yaml")
		var meta metav1.PartialObjectMetadata
		if err := json.Unmarshal(in, &meta); err != nil {
			t.Fatal(err)
		}
		tj := readTrainJob(t, "testdata/pod/"+name+".trainjob.yaml").(oneTrainJob)
		tj.obj.UID, tj.obj.ResourceVersion = types.UID("tj-"+name), "1" // stored: its settings are cached
		h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: tj}
		body := reviewOf(t, admissionv1.AdmissionRequest{UID: types.UID("uid-" + name), Namespace: meta.Namespace,
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: in}})
		_, review := serveReview(t, h, "application/json", body)
		if len(review.Response.Patch) == 0 {
			t.Fatalf("%s: no patch", name)
		}
		cases = append(cases, admission{h, body, mustJSON(t, review.Response)})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 50 {
				c := cases[(g+k)%len(cases)]
				req := httptest.NewRequest(http.MethodPost, "/mutate-pod", bytes.NewReader(c.body))
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				c.h.ServeHTTP(rec, req)
				var review admissionv1.AdmissionReview
				if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil {
					t.Errorf("not an AdmissionReview: %v: %s", err, rec.Body.Bytes())
					return
				}
				if got, err := json.Marshal(review.Response); err != nil || !bytes.Equal(got, c.want) {
					t.Errorf("concurrent answer\n%s\nalone\n%s", got, c.want)
					return
				}
			}
		})
	}
	wg.Wait()
}
