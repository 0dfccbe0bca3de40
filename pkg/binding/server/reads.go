package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// Headers of the read endpoint's answers.
const (
	// HeaderPresignExpires is when a presigned URL (in Location) expires, RFC 3339.
	HeaderPresignExpires = "X-Tether-Presign-Expires"
	// HeaderStream asks for the object through the control plane even when
	// the store could presign ("true").
	HeaderStream = "X-Tether-Stream"
)

// maxBearerBytes bounds the Authorization header: ServiceAccount tokens are
// about 1 KiB, OIDC ID tokens with many groups a few KiB.
const maxBearerBytes = 16 << 10

// reviewRate bounds the TokenReviews and SubjectAccessReviews the endpoint
// asks the API server for, whoever calls it.
const (
	reviewRate  = 50
	reviewBurst = 100
)

// DefaultPresignTTL is how long a presigned read URL lives.
const DefaultPresignTTL = 5 * time.Minute

// Reviewer authenticates a Kubernetes bearer token and authorizes its user.
type Reviewer interface {
	// Authenticate returns the token's user (TokenReview).
	Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error)
	// CanGetBinding reports whether user may get the WorkerBinding
	// (SubjectAccessReview), and the authorizer's reason when not.
	CanGetBinding(ctx context.Context, user authnv1.UserInfo, namespace, name string) (bool, string, error)
}

// KubeReviewer asks the API server.
type KubeReviewer struct{ Clientset kubernetes.Interface }

// errUnauthenticated is a token the API server does not accept.
var errUnauthenticated = errors.New("unauthenticated")

// Authenticate creates a TokenReview.
func (k KubeReviewer) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error) {
	tr, err := k.Clientset.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		return authnv1.UserInfo{}, errUnauthenticated
	}
	return tr.Status.User, nil
}

// CanGetBinding creates a SubjectAccessReview for get on the WorkerBinding.
func (k KubeReviewer) CanGetBinding(ctx context.Context, u authnv1.UserInfo, namespace, name string) (bool, string, error) {
	extra := map[string]authzv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = authzv1.ExtraValue(v)
	}
	sar, err := k.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: namespace, Verb: "get", Group: tetherv1.GroupVersion.Group,
			Resource: "workerbindings", Name: name},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return sar.Status.Allowed, sar.Status.Reason, nil
}

// reads serves the orchestrator read endpoint.
type reads struct {
	s       *Server
	backend upload.Backend
	rev     Reviewer
	ttl     time.Duration
	limit   *rate.Limiter
}

// EnableArtifactReads serves the orchestrator read endpoint on the binding
// server's listener: a caller with a Kubernetes bearer token allowed to get
// a WorkerBinding reads that job's stored objects, through a presigned URL
// (a redirect) when the backend can sign one, else streamed. ttl 0 is
// DefaultPresignTTL.
func (s *Server) EnableArtifactReads(backend upload.Backend, rev Reviewer, ttl time.Duration) {
	if ttl <= 0 {
		ttl = DefaultPresignTTL
	}
	r := &reads{s: s, backend: backend, rev: rev, ttl: ttl, limit: rate.NewLimiter(reviewRate, reviewBurst)}
	next := s.handler
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, tetherv1.ReadPathPrefix) {
			r.ServeHTTP(w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// ReadError is the body of a refused read.
type ReadError struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (r *reads) fail(w http.ResponseWriter, status int, reason, format string, args ...any) {
	r.s.metrics.refusals.WithLabelValues("read_" + reason).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ReadError{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// parseReadPath splits <ns>/workerbindings/<name>/objects/<path>.
func parseReadPath(p string) (ns, name, rel string, err error) {
	rest := strings.TrimPrefix(p, tetherv1.ReadPathPrefix)
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) != 5 || parts[1] != "workerbindings" || parts[3] != "objects" || parts[4] == "" {
		return "", "", "", fmt.Errorf("path %q: use %s<namespace>/workerbindings/<name>/objects/<path>", truncate(p, 200), tetherv1.ReadPathPrefix)
	}
	ns, name, rel = parts[0], parts[2], parts[4]
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", "", fmt.Errorf("namespace %q: %s", truncate(ns, 80), strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", "", fmt.Errorf("WorkerBinding name %q: %s", truncate(name, 80), strings.Join(errs, "; "))
	}
	return ns, name, rel, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func (r *reads) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		r.fail(w, http.StatusMethodNotAllowed, "method", "%s is not served: the read endpoint answers GET only", req.Method)
		return
	}
	ns, name, rel, err := parseReadPath(req.URL.Path)
	if err != nil {
		r.fail(w, http.StatusBadRequest, "bad_path", "%v", err)
		return
	}
	auth := req.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	switch {
	case !ok || token == "":
		r.fail(w, http.StatusUnauthorized, "no_token", "no bearer token: send Authorization: Bearer <Kubernetes token> (kubectl create token, or your kubeconfig's)")
		return
	case len(auth) > maxBearerBytes:
		r.fail(w, http.StatusUnauthorized, "token_too_long", "the Authorization header is %d bytes; at most %d are read", len(auth), maxBearerBytes)
		return
	}
	if !r.limit.Allow() {
		w.Header().Set("Retry-After", "1")
		r.fail(w, http.StatusTooManyRequests, "slow_down", "more than %d reads per second on this control plane replica: retry after Retry-After", reviewRate)
		return
	}
	ctx := req.Context()
	user, err := r.rev.Authenticate(ctx, token)
	if errors.Is(err, errUnauthenticated) {
		r.fail(w, http.StatusUnauthorized, "unauthenticated", "the API server did not accept the bearer token (expired, or not a token of this cluster)")
		return
	}
	if err != nil {
		r.s.log.Error(err, "authenticating a read", "binding", ns+"/"+name)
		r.fail(w, http.StatusServiceUnavailable, "review_failed", "could not authenticate the token with the API server: retry")
		return
	}
	allowed, why, err := r.rev.CanGetBinding(ctx, user, ns, name)
	if err != nil {
		r.s.log.Error(err, "authorizing a read", "user", user.Username, "binding", ns+"/"+name)
		r.fail(w, http.StatusServiceUnavailable, "review_failed", "could not authorize the request with the API server: retry")
		return
	}
	if !allowed {
		r.s.log.Info("read refused", "user", user.Username, "binding", ns+"/"+name, "reason", why)
		r.fail(w, http.StatusForbidden, "forbidden", "user %q may not get workerbindings.tether.dev %q in namespace %q: grant get on workerbindings (RBAC) to read its artifacts",
			user.Username, name, ns)
		return
	}
	wb := &tetherv1.WorkerBinding{}
	if err := r.s.cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, wb); err != nil {
		if apierrors.IsNotFound(err) {
			r.fail(w, http.StatusNotFound, "no_binding", "no WorkerBinding %s/%s", ns, name)
			return
		}
		r.fail(w, http.StatusServiceUnavailable, "cache", "reading the WorkerBinding: %v", err)
		return
	}
	key := wb.Spec.JobID + "/" + rel
	if err := objects.CheckReadKey(key); err != nil {
		r.fail(w, http.StatusBadRequest, "bad_key", "object %q: %v", truncate(rel, 200), err)
		return
	}
	r.s.log.V(1).Info("artifact read", "user", user.Username, "binding", ns+"/"+name, "key", key)
	if p, ok := r.backend.(objects.Presigner); ok && req.Header.Get(HeaderStream) != "true" {
		// The object must exist: a presigned URL of a missing key would
		// only fail later, at the store, with less to say.
		if _, err := r.backend.Head(ctx, key); err != nil {
			r.storeError(w, rel, err)
			return
		}
		u, err := p.PresignGet(ctx, key, r.ttl)
		if err != nil {
			r.storeError(w, rel, err)
			return
		}
		w.Header().Set(HeaderPresignExpires, r.s.opts.Now().Add(r.ttl).UTC().Format(time.RFC3339))
		w.Header().Set("Location", u.String())
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	o, ok := r.backend.(objects.Opener)
	if !ok {
		r.fail(w, http.StatusNotImplemented, "no_reader", "the artifact backend can neither presign nor stream objects")
		return
	}
	body, info, err := o.Open(ctx, key)
	if err != nil {
		r.storeError(w, rel, err)
		return
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	w.Header().Set("ETag", `"`+info.ETag+`"`)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, body); err != nil {
		r.s.log.Info("artifact read ended early", "binding", ns+"/"+name, "key", key, "error", err.Error())
	}
}

func (r *reads) storeError(w http.ResponseWriter, rel string, err error) {
	if errors.Is(err, upload.ErrNotFound) {
		r.fail(w, http.StatusNotFound, "no_object", "no stored object %q for this job", truncate(rel, 200))
		return
	}
	r.s.log.Error(err, "reading the artifact store", "object", rel)
	w.Header().Set("Retry-After", "5")
	r.fail(w, http.StatusServiceUnavailable, "store", "the artifact store failed: retry (the control plane's log has the error)")
}
