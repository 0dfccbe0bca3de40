package codec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// serveReview POSTs body to ServePodReview with admit and returns the
// decoded AdmissionReview, which comes with HTTP 200 whatever it answers
// (as controller-runtime's webhooks answer).
func serveReview(t *testing.T, admit Admit, contentType string, body []byte) admissionv1.AdmissionReview {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/mutate-pod", bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	rec := httptest.NewRecorder()
	ServePodReview(rec, req, admit, undecodablePod)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v: %s", err, rec.Body.Bytes())
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
		t.Fatalf("response %s: want an admission.k8s.io/v1 AdmissionReview with a response", rec.Body.Bytes())
	}
	if rec.Code != http.StatusOK {
		t.Errorf("HTTP %d, want 200", rec.Code)
	}
	return review
}

// undecodablePod stands in for the webhook's answer to an object that is
// not a pod.
func undecodablePod(err error) admission.Response {
	return admission.Errored(http.StatusBadRequest, errors.New("the AdmissionReview's object is not a decodable Pod: "+err.Error()))
}

func reviewOf(t *testing.T, req admissionv1.AdmissionRequest) []byte {
	t.Helper()
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &req,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const testPod = `{"metadata":{"name":"train-node-0-0","namespace":"ml-team","annotations":{"a":"b"}},` +
	`"spec":{"containers":[{"name":"node","image":"trainer"}]}}`

// TestPodServeHTTPRefusesBadReviews: what is not a v1 AdmissionReview of a
// pod gets an error saying what was wrong, and a non-CREATE is allowed as is;
// neither reaches admit.
func TestPodServeHTTPRefusesBadReviews(t *testing.T) {
	admit := func(context.Context, *admissionv1.AdmissionRequest, *corev1.Pod) admission.Response {
		t.Error("admit called")
		return admission.Allowed("")
	}
	create := admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create, Namespace: "ml-team", Object: runtime.RawExtension{Raw: []byte(testPod)}}
	v1beta1 := bytes.Replace(reviewOf(t, create), []byte(`"admission.k8s.io/v1"`), []byte(`"admission.k8s.io/v1beta1"`), 1)
	notAPod := create
	notAPod.Object = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":"node"}}`)}
	for name, tc := range map[string]struct {
		contentType string
		body        []byte
		code        int32
		message     string
		uid         types.UID
	}{
		"wrong content type": {"text/plain", reviewOf(t, create), http.StatusBadRequest, `Content-Type "text/plain": want application/json`, ""},
		"empty body":         {"application/json", nil, http.StatusBadRequest, "request body is empty", ""},
		"not JSON":           {"application/json", []byte("{"), http.StatusBadRequest, "undecodable AdmissionReview", ""},
		"v1beta1":            {"application/json", v1beta1, http.StatusBadRequest, "admissionReviewVersions must be [v1]", ""},
		"no request":         {"application/json", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "without a request", ""},
		"undecodable pod":    {"application/json", reviewOf(t, notAPod), http.StatusBadRequest, "not a decodable Pod", "u1"},
		"too large":          {"application/json", bytes.Repeat([]byte(" "), MaxReviewBytes+1), http.StatusRequestEntityTooLarge, "larger than", ""},
	} {
		t.Run(name, func(t *testing.T) {
			review := serveReview(t, admit, tc.contentType, tc.body)
			r := review.Response
			if r.Allowed || r.Result == nil || r.Result.Code != tc.code || !strings.Contains(r.Result.Message, tc.message) || r.UID != tc.uid {
				t.Errorf("response %+v (result %+v), want refused with code %d, uid %q and a message containing %q", r, r.Result, tc.code, tc.uid, tc.message)
			}
		})
	}

	del := create
	del.Operation = admissionv1.Delete
	del.Object = runtime.RawExtension{}
	review := serveReview(t, admit, "application/json", reviewOf(t, del))
	if r := review.Response; !r.Allowed || r.UID != "u1" || len(r.Patch) != 0 {
		t.Errorf("DELETE: response %+v, want allowed unchanged with uid u1", r)
	}
}

// TestServePodReviewAsksAdmit: a pod CREATE reaches admit with the request
// and its pod decoded, and admit's answer (its Patched patch and warnings)
// comes back in the review with the request's uid; a panic in admit answers
// 500.
func TestServePodReviewAsksAdmit(t *testing.T) {
	create := admissionv1.AdmissionRequest{UID: "u2", Operation: admissionv1.Create, Namespace: "ml-team", Object: runtime.RawExtension{Raw: []byte(testPod)}}
	ops := []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata/annotations/c", Value: "d"}}
	review := serveReview(t, func(_ context.Context, req *admissionv1.AdmissionRequest, pod *corev1.Pod) admission.Response {
		if req.UID != "u2" || pod.Name != "train-node-0-0" || pod.Annotations["a"] != "b" || len(pod.Spec.Containers) != 1 {
			t.Errorf("admit got request %+v and pod %+v", req, pod)
		}
		resp, err := Patched(ops, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Warnings = []string{"w"}
		return resp
	}, "application/json", reviewOf(t, create))
	want, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	r := review.Response
	if !r.Allowed || r.UID != "u2" || !bytes.Equal(r.Patch, want) || r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch ||
		len(r.Warnings) != 1 || r.Warnings[0] != "w" {
		t.Errorf("response %+v, want allowed with uid u2, warning w and patch %s", r, want)
	}

	review = serveReview(t, func(context.Context, *admissionv1.AdmissionRequest, *corev1.Pod) admission.Response {
		panic("boom")
	}, "application/json", reviewOf(t, create))
	if r := review.Response; r.Allowed || r.UID != "u2" || r.Result == nil || r.Result.Code != http.StatusInternalServerError {
		t.Errorf("panic: response %+v, want refused with code 500 and uid u2", r)
	}
}
