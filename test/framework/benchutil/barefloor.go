package benchutil

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxReviewBytes bounds the bare floor's review body, as the pod webhook
// bounds its own.
const MaxReviewBytes = 7 << 20

// BareFloor is the admission benchmarks' bare floor: a plain net/http
// handler that decodes the AdmissionReview and its pod and allows the pod
// with no patch, no controller-runtime, informers or metrics: what any pod
// webhook pays before it does anything of its own, so that the webhook's
// own cost is read against it.
func BareFloor(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxReviewBytes+1))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case len(body) > MaxReviewBytes:
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	case r.Header.Get("Content-Type") != "application/json":
		http.Error(w, "want Content-Type application/json", http.StatusUnsupportedMediaType)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		http.Error(w, "undecodable pod: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true},
	})
}
