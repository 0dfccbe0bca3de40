package artifactreads

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
)

// tokenReviewer knows one token, alice's, and allows her everything.
type tokenReviewer struct{}

func (tokenReviewer) Authenticate(_ context.Context, token string) (authnv1.UserInfo, error) {
	if token != "alice-token" {
		return authnv1.UserInfo{}, errUnauthenticated
	}
	return authnv1.UserInfo{Username: "alice"}, nil
}

func (tokenReviewer) Authorize(context.Context, authnv1.UserInfo, authzv1.ResourceAttributes) (bool, string, error) {
	return true, "", nil
}

// TestRedirectsOnlyOnTheDirectPath: the binding Service's read path, whose
// caller reaches the store itself, answers a store that presigns with a
// redirect to a presigned URL (a stream when asked); the read API never
// redirects (TestAggregatedReads).
func TestRedirectsOnlyOnTheDirectPath(t *testing.T) {
	fs, err := fsstore.NewFSBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	backend := presigningStore{fs}
	object := []byte("step-100")
	if _, err := backend.Put(t.Context(), "job-a/ckpt/step-100.pt", bytes.NewReader(object), int64(len(object))); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = tetherv1.AddToScheme(scheme)
	bindings := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm"}, Spec: tetherv1.WorkerBindingSpec{JobID: "job-a"}},
	).Build()
	h := New(Options{Backend: backend, Reviewer: tokenReviewer{}, Bindings: bindings, Log: logr.Discard()})
	read := func(stream bool) *http.Response {
		req := httptest.NewRequest(http.MethodGet, tetherv1.ReadPathPrefix+"team-a/workerbindings/llm/objects/ckpt/step-100.pt", nil)
		req.Header.Set("Authorization", "Bearer alice-token")
		if stream {
			req.Header.Set(names.HeaderStream, "true")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Result()
	}
	resp := read(false)
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "https://store.invalid/bucket/job-a/ckpt/step-100.pt?X-Amz-Signature=test" ||
		resp.Header.Get(names.HeaderPresignExpires) == "" {
		t.Errorf("direct read from a store that presigns: %d Location %q, want 307 to the presigned URL with its expiry", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp = read(true)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, object) {
		t.Errorf("direct read asked as a stream: %d %q, want 200 and the object", resp.StatusCode, body)
	}
}
