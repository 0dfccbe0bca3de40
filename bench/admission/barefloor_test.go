package admission_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// bareFloorPath is the bare floor's one path, on its own server.
const bareFloorPath = "/bare-floor"

// maxReviewBytes is the request bound controller-runtime's webhook applies.
const maxReviewBytes = 7 << 20

// serveBareFloor serves the bare floor on 127.0.0.1 and returns its URL: a
// plain net/http server with the TLS settings controller-runtime's webhook
// server uses (tls.Listen, NextProtos h2 only, the same certificate, Go's
// default TLS versions and suites) and its http.Server limits, whose one
// handler decodes the AdmissionReview and its pod with encoding/json and
// answers allowed with no patch. No controller-runtime, informer, metric or
// logger: what any pod webhook pays before it does anything of its own.
func serveBareFloor(b *testing.B, ctx context.Context, certPEM, keyPEM []byte) string {
	b.Helper()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	cfg := &tls.Config{
		NextProtos:     []string{"h2"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil },
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(bareFloorPath, bareFloor)
	srv := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return ctx },
		Handler:           mux,
		MaxHeaderBytes:    1 << 20,
		IdleTimeout:       90 * time.Second,
		ReadHeaderTimeout: 32 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	b.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			b.Error("bare floor server:", err)
		}
	})
	return fmt.Sprintf("https://%s%s", ln.Addr(), bareFloorPath)
}

// bareFloor decodes the AdmissionReview and its pod and allows the pod.
func bareFloor(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case len(body) > maxReviewBytes:
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
