package artifactreads

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

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/upload"
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

// Reviewer authenticates a Kubernetes bearer token and authorizes a user.
type Reviewer interface {
	// Authenticate returns the token's user (TokenReview).
	Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error)
	// Authorize reports whether user may do what attrs name
	// (SubjectAccessReview), and the authorizer's reason when not.
	Authorize(ctx context.Context, user authnv1.UserInfo, attrs authzv1.ResourceAttributes) (bool, string, error)
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

// Authorize creates a SubjectAccessReview.
func (k KubeReviewer) Authorize(ctx context.Context, u authnv1.UserInfo, attrs authzv1.ResourceAttributes) (bool, string, error) {
	extra := map[string]authzv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = authzv1.ExtraValue(v)
	}
	sar, err := k.Clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra, ResourceAttributes: &attrs,
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return sar.Status.Allowed, sar.Status.Reason, nil
}

// Options are the read endpoint's dependencies.
type Options struct {
	// Backend holds the objects: a read of the binding Service's path is
	// redirected to a presigned URL when it is an objects.Presigner, and
	// streamed when it is an objects.Opener (always through the API server).
	Backend upload.Backend
	// Reviewer authenticates and authorizes the callers.
	Reviewer Reviewer
	// Bindings reads WorkerBindings (the control plane's cache).
	Bindings client.Reader
	// TTL is a presigned URL's lifetime; 0 is DefaultPresignTTL.
	TTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Log logs failed reviews, refused reads and reads that ended early.
	Log logr.Logger
	// OnRefused counts a refused read by reason; nil counts nothing.
	OnRefused func(reason string)
}

// Handler serves the orchestrator read endpoint: a caller allowed to read a
// WorkerBinding's objects reads that job's stored objects: streamed through
// the API server, and on the binding Service's path through a presigned URL
// (a redirect) when the backend can sign one, else streamed.
// New answers paths under tetherv1.ReadPathPrefix for callers with a
// Kubernetes bearer token; NewAggregated those under
// tetherv1.ReadAPIPathPrefix that the kube-apiserver proxies.
type Handler struct {
	opts  Options
	limit *rate.Limiter
	route route
	// listed keeps what verified manifests list (verified.go).
	listed pending.Listed
}

// route is what differs between the two ways in: where the paths start,
// who the caller is, and what the caller must be allowed.
type route struct {
	prefix string
	// identify returns the caller, or a refusal already written.
	identify func(w http.ResponseWriter, req *http.Request) (authnv1.UserInfo, bool)
	// attributes is the permission a read of binding ns/name needs.
	attributes func(ns, name string) authzv1.ResourceAttributes
	// forbidden explains a refusal to the caller: what to grant.
	forbidden string
	// streamOnly never answers with a redirect to a presigned URL: the
	// kube-apiserver does not pass an aggregated API's redirect on (it
	// answers 502, "the backend attempted to redirect this request"), and
	// a caller who reads through it may not reach the store anyway.
	streamOnly bool
}

// New returns the read endpoint's handler for callers with a Kubernetes
// bearer token (TokenReview), allowed to get the WorkerBinding.
func New(opts Options) *Handler {
	h := newHandler(opts)
	h.route = route{
		prefix:   tetherv1.ReadPathPrefix,
		identify: h.bearer,
		attributes: func(ns, name string) authzv1.ResourceAttributes {
			return authzv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: tetherv1.GroupVersion.Group, Resource: "workerbindings", Name: name}
		},
		forbidden: "grant get on workerbindings.tether.dev (RBAC) to read its artifacts",
	}
	return h
}

func newHandler(opts Options) *Handler {
	if opts.TTL <= 0 {
		opts.TTL = DefaultPresignTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.OnRefused == nil {
		opts.OnRefused = func(string) {}
	}
	return &Handler{opts: opts, limit: rate.NewLimiter(reviewRate, reviewBurst)}
}

// ReadError is the body of a refused read.
type ReadError struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (r *Handler) fail(w http.ResponseWriter, status int, reason, format string, args ...any) {
	r.opts.OnRefused(reason)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ReadError{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// parseReadPath splits <prefix><ns>/workerbindings/<name>/objects/<path>.
func parseReadPath(prefix, p string) (ns, name, rel string, err error) {
	rest := strings.TrimPrefix(p, prefix)
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) != 5 || parts[1] != "workerbindings" || parts[3] != "objects" || parts[4] == "" {
		return "", "", "", fmt.Errorf("path %q: use %s<namespace>/workerbindings/<name>/objects/<path>", truncate(p, 200), prefix)
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

// bearer authenticates the caller's Kubernetes bearer token.
func (r *Handler) bearer(w http.ResponseWriter, req *http.Request) (authnv1.UserInfo, bool) {
	auth := req.Header.Get("Authorization")
	token, ok := strings.CutPrefix(auth, "Bearer ")
	switch {
	case !ok || token == "":
		r.fail(w, http.StatusUnauthorized, "no_token", "no bearer token: send Authorization: Bearer <Kubernetes token> (kubectl create token, or your kubeconfig's)")
		return authnv1.UserInfo{}, false
	case len(auth) > maxBearerBytes:
		r.fail(w, http.StatusUnauthorized, "token_too_long", "the Authorization header is %d bytes; at most %d are read", len(auth), maxBearerBytes)
		return authnv1.UserInfo{}, false
	}
	if !r.allow(w) {
		return authnv1.UserInfo{}, false
	}
	user, err := r.opts.Reviewer.Authenticate(req.Context(), token)
	if errors.Is(err, errUnauthenticated) {
		r.fail(w, http.StatusUnauthorized, "unauthenticated", "the API server did not accept the bearer token (expired, or not a token of this cluster)")
		return authnv1.UserInfo{}, false
	}
	if err != nil {
		r.opts.Log.Error(err, "authenticating a read")
		r.fail(w, http.StatusServiceUnavailable, "review_failed", "could not authenticate the token with the API server: retry")
		return authnv1.UserInfo{}, false
	}
	return user, true
}

// allow spends one of the replica's reviews per second, or refuses.
func (r *Handler) allow(w http.ResponseWriter) bool {
	if r.limit.Allow() {
		return true
	}
	w.Header().Set("Retry-After", "1")
	r.fail(w, http.StatusTooManyRequests, "slow_down", "more than %d reads per second on this control plane replica: retry after Retry-After", reviewRate)
	return false
}

// ServeHTTP answers GET <prefix><namespace>/workerbindings/<name>/objects/<path>.
func (r *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		r.fail(w, http.StatusMethodNotAllowed, "method", "%s is not served: the read endpoint answers GET only", req.Method)
		return
	}
	ns, name, rel, err := parseReadPath(r.route.prefix, req.URL.Path)
	if err != nil {
		r.fail(w, http.StatusBadRequest, "bad_path", "%v", err)
		return
	}
	user, ok := r.route.identify(w, req)
	if !ok {
		return
	}
	ctx := req.Context()
	allowed, why, err := r.opts.Reviewer.Authorize(ctx, user, r.route.attributes(ns, name))
	if err != nil {
		r.opts.Log.Error(err, "authorizing a read", "user", user.Username, "binding", ns+"/"+name)
		r.fail(w, http.StatusServiceUnavailable, "review_failed", "could not authorize the request with the API server: retry")
		return
	}
	if !allowed {
		r.opts.Log.Info("read refused", "user", user.Username, "binding", ns+"/"+name, "reason", why)
		r.fail(w, http.StatusForbidden, "forbidden", "user %q may not read the objects of WorkerBinding %q in namespace %q: %s",
			user.Username, name, ns, r.route.forbidden)
		return
	}
	wb := &tetherv1.WorkerBinding{}
	if err := r.opts.Bindings.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, wb); err != nil {
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
	if r.refuseUnverified(ctx, w, wb, rel) {
		r.opts.Log.V(1).Info("artifact read refused: not a verified artifact of a Succeeded binding", "user", user.Username, "binding", ns+"/"+name, "key", key)
		return
	}
	r.opts.Log.V(1).Info("artifact read", "user", user.Username, "binding", ns+"/"+name, "key", key)
	r.serveObject(w, req, key, rel)
}

// serveObject redirects to a presigned URL of key, or streams it: always
// through the API server (route.streamOnly), and when the caller asks
// (names.HeaderStream).
func (r *Handler) serveObject(w http.ResponseWriter, req *http.Request, key, rel string) {
	ctx := req.Context()
	if p, ok := r.opts.Backend.(objects.Presigner); ok && !r.route.streamOnly && req.Header.Get(names.HeaderStream) != "true" {
		// The object must exist: a presigned URL of a missing key would
		// only fail later, at the store, with less to say.
		if _, err := r.opts.Backend.Head(ctx, key); err != nil {
			r.storeError(w, rel, err)
			return
		}
		u, err := p.PresignGet(ctx, key, r.opts.TTL)
		if err != nil {
			r.storeError(w, rel, err)
			return
		}
		w.Header().Set(names.HeaderPresignExpires, r.opts.Now().Add(r.opts.TTL).UTC().Format(time.RFC3339))
		w.Header().Set("Location", u.String())
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	o, ok := r.opts.Backend.(objects.Opener)
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
		r.opts.Log.Info("artifact read ended early", "key", key, "error", err.Error())
	}
}

func (r *Handler) storeError(w http.ResponseWriter, rel string, err error) {
	if errors.Is(err, upload.ErrNotFound) {
		r.fail(w, http.StatusNotFound, "no_object", "no stored object %q for this job", truncate(rel, 200))
		return
	}
	r.opts.Log.Error(err, "reading the artifact store", "object", rel)
	w.Header().Set("Retry-After", "5")
	r.fail(w, http.StatusServiceUnavailable, "store", "the artifact store failed: retry (the control plane's log has the error)")
}
