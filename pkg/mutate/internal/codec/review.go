package codec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// MaxReviewBytes bounds an AdmissionReview the pod webhook reads: the bound
// controller-runtime's webhooks apply (kube-apiserver's own request limit is
// 3 MiB per object).
const MaxReviewBytes = 7 << 20

// podReview is an admission.k8s.io/v1 AdmissionReview whose object is decoded
// as a Pod in the same pass as the review: the outer Object field shadows the
// embedded request's RawExtension (encoding/json picks the shallower field).
type podReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *podRequest `json:"request,omitempty"`
}

type podRequest struct {
	admissionv1.AdmissionRequest
	Object corev1.Pod `json:"object"`
}

var reviewBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Admit answers a pod CREATE: req is the review's request, pod its object.
// A patch in the answer is Patched's, whose buffer ServePodReview takes back
// once the review is written.
type Admit func(ctx context.Context, req *admissionv1.AdmissionRequest, pod *corev1.Pod) admission.Response

// ServePodReview serves the pod webhook: the AdmissionReview kube-apiserver
// POSTs (admission.k8s.io/v1, the webhook configuration's only
// admissionReviewVersions) in, the AdmissionReview with admit's answer out.
// A review that is not of a pod CREATE is answered here: allowed for another
// operation, undecodable's answer for an object that is no decodable pod,
// an error for what is not such a review. It replaces controller-runtime's
// webhook.Admission on this path because of what that costs per admission
// (profiled in test/performance/admission): a universal-deserializer pass
// that decodes the review twice, a second decode of the pod, and a logger
// built with the request's values whether or not anything is logged.
// Served (as mutate.PodHandler) on controller-runtime's webhook server, it
// keeps that server's TLS and its per-path metrics.
func ServePodReview(w http.ResponseWriter, r *http.Request, admit Admit, undecodable func(error) admission.Response) {
	ctx := r.Context()
	buf := reviewBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= 1<<20 { // a rare huge review is not kept
			buf.Reset()
			reviewBuffers.Put(buf)
		}
	}()
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		writeReview(w, "", admission.Errored(http.StatusBadRequest, fmt.Errorf("Content-Type %q: want application/json", ct)))
		return
	}
	if r.ContentLength > 0 && r.ContentLength <= MaxReviewBytes {
		buf.Grow(int(r.ContentLength))
	}
	var n int64
	var err error
	if r.Body != nil {
		n, err = buf.ReadFrom(io.LimitReader(r.Body, MaxReviewBytes+1))
	}
	switch {
	case n == 0 && err == nil:
		writeReview(w, "", admission.Errored(http.StatusBadRequest, errors.New("request body is empty: want an AdmissionReview")))
		return
	case err != nil:
		writeReview(w, "", admission.Errored(http.StatusBadRequest, fmt.Errorf("reading the AdmissionReview: %w", err)))
		return
	case n > MaxReviewBytes:
		writeReview(w, "", admission.Errored(http.StatusRequestEntityTooLarge, fmt.Errorf("AdmissionReview larger than %d bytes", MaxReviewBytes)))
		return
	}

	var review podReview
	if err := json.Unmarshal(buf.Bytes(), &review); err != nil {
		// Tell an undecodable pod (which the webhook counts) from an
		// undecodable review.
		var plain admissionv1.AdmissionReview
		if perr := json.Unmarshal(buf.Bytes(), &plain); perr == nil && plain.Request != nil {
			writeReview(w, plain.Request.UID, undecodable(err))
			return
		}
		writeReview(w, "", admission.Errored(http.StatusBadRequest, fmt.Errorf("undecodable AdmissionReview: %w", err)))
		return
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" || review.Request == nil {
		writeReview(w, "", admission.Errored(http.StatusBadRequest, fmt.Errorf(
			"got apiVersion %q kind %q with%s a request: want an admission.k8s.io/v1 AdmissionReview with a request "+
				"(the webhook configuration's admissionReviewVersions must be [v1])", review.APIVersion, review.Kind, noneIf(review.Request == nil))))
		return
	}
	req := &review.Request.AdmissionRequest
	defer func() {
		// As controller-runtime's webhooks do: a panic answers 500, it does
		// not end the process.
		if p := recover(); p != nil {
			logf.FromContext(ctx).Error(fmt.Errorf("panic: %v", p), "pod webhook panicked", "requestID", req.UID)
			writeReview(w, req.UID, admission.Errored(http.StatusInternalServerError, fmt.Errorf("panic: %v [recovered]", p)))
		}
	}()
	if req.Operation != admissionv1.Create {
		writeReview(w, req.UID, admission.Allowed(""))
		return
	}
	resp := admit(ctx, req, &review.Request.Object)
	writeReview(w, req.UID, resp)
	releasePatch(resp.Patch) // encoded into the review: nothing reads it again
}

func noneIf(none bool) string {
	if none {
		return "out"
	}
	return ""
}

// writeReview completes resp (uid, status code, the encoded patch) and writes
// it as an admission.k8s.io/v1 AdmissionReview.
func writeReview(w http.ResponseWriter, uid types.UID, resp admission.Response) {
	if err := resp.Complete(admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: uid}}); err != nil {
		resp = admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the patch: %w", err))
		resp.UID = uid
	}
	w.Header().Set("Content-Type", "application/json")
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: &resp.AdmissionResponse,
	}
	// A failed write is the connection's: the API server sees it fail.
	_ = json.NewEncoder(w).Encode(&out)
}
