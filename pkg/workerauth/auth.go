package workerauth

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// Refusal is a request the gate turns down: an HTTP status, a protocol
// error code, a metric reason and a message for the client.
type Refusal struct {
	Status  int
	Code    string
	Reason  string
	Message string
	// RetryAfter, when set, is sent as Retry-After.
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

// Refuse makes a Refusal; the message is format's.
func Refuse(status int, code, reason, format string, args ...any) *Refusal {
	return &Refusal{Status: status, Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Write answers the request with the refusal (binding.ErrorResponse).
func (r *Refusal) Write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	if r.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(r.RetryAfter)))
	}
	w.WriteHeader(r.Status)
	_ = json.NewEncoder(w).Encode(binding.ErrorResponse{Code: r.Code, Message: r.Message})
}

// TokenHashIndex indexes WorkerBindings by the hashes of the tokens they
// hold: spec.tokenSHA256 and, while it lasts, spec.previousToken.sha256.
const TokenHashIndex = "spec.tokenSHA256"

// IndexTokenHash is the indexer function for TokenHashIndex.
func IndexTokenHash(o client.Object) []string {
	wb := o.(*tetherv1.WorkerBinding)
	if p := wb.Spec.PreviousToken; p != nil {
		return []string{wb.Spec.TokenSHA256, p.SHA256}
	}
	return []string{wb.Spec.TokenSHA256}
}

// Options configure a Gate.
type Options struct {
	// Cache reads WorkerBindings (indexed by TokenHashIndex), trainer pods
	// and TrainJob metadata.
	Cache client.Reader
	// Live reads from the API server when the cache may lag (a binding or
	// pod created a moment ago); nil never does.
	Live client.Reader
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// PodTokens reviews the pod tokens (names.HeaderPodToken) that prove
	// which pod a request comes from (podtoken.go). Nil refuses every
	// register, session and artifact request with 503.
	PodTokens PodTokenReviewer
}

// Gate authenticates workers' requests: the job token names the binding,
// the claimed identity must be the binding's, the pod token proves the
// pod, and the node must be one the binding binds. It also holds the
// per-token and per-address request budgets (ratelimit.go).
type Gate struct {
	cache, live client.Reader
	now         func() time.Time
	// limits are the per-token request budgets of real tokens, unknown the
	// per-address budgets of tokens no binding holds; liveLookups bounds
	// the API reads for tokens and TrainJobs the cache does not know.
	limits      *tokenLimits
	unknown     *tokenLimits
	liveLookups *rate.Limiter
	// pods reviews and remembers pod tokens (nil: Options.PodTokens unset).
	pods *podProofs
}

// New returns a Gate. opts.Cache must have the TokenHashIndex on
// WorkerBindings.
func New(opts Options) *Gate {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	g := &Gate{cache: opts.Cache, live: opts.Live, now: opts.Now,
		limits: newTokenLimits(), unknown: newAddressLimits(), liveLookups: rate.NewLimiter(liveLookupRate, liveLookupBurst)}
	if opts.PodTokens != nil {
		g.pods = newPodProofs(opts.PodTokens, opts.Now)
	}
	return g
}

// Claim is who a register or session request says it is.
type Claim struct {
	// Namespace is the namespace the request names: where a token the
	// cache does not know yet is looked up.
	Namespace       string
	JobID, WorkerID string
	// Pod is the pod the request speaks for.
	Pod binding.PodIdentity
	// PodInBindingNamespace takes Pod.Namespace from the binding: a session
	// open names its namespace as a lookup hint only.
	PodInBindingNamespace bool
	// Registering: a registration, which a cancelled binding admits (the
	// job may have been resumed: lifecycle.Resumable); the registration
	// itself reopens it, or leaves it final for a pod of the cancelled
	// attempt, whose session is then refused.
	Registering bool
}

// Worker is an admitted request's worker.
type Worker struct {
	// Binding holds the request's token; it is set on a refusal too once
	// the token was found (for the log line).
	Binding *tetherv1.WorkerBinding
	// Pod is the trainer pod the request is proven to come from.
	Pod *corev1.Pod
	// Rank is the pod's node rank.
	Rank int32
}

// Admit is the gate of register and session requests: authenticate the
// token, check the claimed identity and prove the pod, then the node's rank.
func (g *Gate) Admit(ctx context.Context, r *http.Request, c Claim) (Worker, *Refusal) {
	wb, ref := g.authenticate(ctx, r, c.Namespace)
	if ref != nil {
		return Worker{}, ref
	}
	resuming := c.Registering && lifecycle.Resumable(&wb.Status)
	if lifecycle.IsFinal(wb.Status.Phase) && !resuming {
		return Worker{Binding: wb}, finished(wb)
	}
	pod := c.Pod
	if c.PodInBindingNamespace {
		pod.Namespace = wb.Namespace
	}
	p, ref := g.checkIdentity(ctx, r, wb, c.JobID, c.WorkerID, pod)
	if ref == nil {
		var rank int32
		if rank, ref = boundRank(wb, p); ref == nil && !(resuming && attemptPod(wb, p.UID)) {
			return Worker{Binding: wb, Pod: p, Rank: rank}, nil
		}
	}
	if resuming && ref != nil && ref.Status == http.StatusServiceUnavailable {
		return Worker{Binding: wb}, ref // not judged yet: retried
	}
	if resuming {
		// A cancelled job's token registers only a new, proven pod of the
		// job once it is resumed; to anything else the job has ended.
		return Worker{Binding: wb}, finished(wb)
	}
	return Worker{Binding: wb}, ref
}

// attemptPod reports whether uid is the pod of one of wb's nodes in its
// last attempt.
func attemptPod(wb *tetherv1.WorkerBinding, uid types.UID) bool {
	for i := range wb.Status.Nodes {
		if wb.Status.Nodes[i].PodUID == string(uid) {
			return true
		}
	}
	return false
}

// authenticate finds the binding that holds the request's token. The binding
// is looked up by the token's SHA-256, and the hashes are compared in
// constant time, so neither the lookup nor the comparison reveals the token.
// A binding created moments ago may not be in the cache yet: on a miss the
// claimed namespace is listed from the API server.
func (g *Gate) authenticate(ctx context.Context, r *http.Request, namespace string) (*tetherv1.WorkerBinding, *Refusal) {
	if v := r.Header.Get(names.HeaderProtocolVersion); v != binding.ProtocolVersion {
		return nil, Refuse(http.StatusBadRequest, binding.ErrUnsupportedVersion, "unsupported_version",
			"%s %q is not supported; this server speaks %q", names.HeaderProtocolVersion, v, binding.ProtocolVersion)
	}
	token, err := binding.TokenFromHeader(r.Header)
	if err != nil {
		return nil, Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "malformed_token", "%v", err)
	}
	hash, now := token.Hash(), g.now()
	wb, err := g.cached(ctx, hash, now)
	if err != nil {
		return nil, Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "looking up the binding: %v", err)
	}
	if wb == nil && g.live != nil && namespace != "" {
		if !g.liveLookups.Allow() {
			// Unknown tokens arrive faster than the API server should be
			// asked about them (ratelimit.go): a real new binding retries.
			return nil, Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "lookup_limited",
				"the token is not in the server's cache and too many unknown tokens are being checked; retry with backoff")
		}
		var live tetherv1.WorkerBindingList
		if err := g.live.List(ctx, &live, client.InNamespace(namespace)); err == nil {
			wb = findByHash(live.Items, hash, now)
		}
	}
	switch {
	case wb == nil:
		return nil, Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "unknown_token",
			"no binding holds this token (the TrainJob was deleted or its token reissued)")
	case wb.DeletionTimestamp != nil:
		return nil, Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "revoked", "the binding is being deleted")
	case lifecycle.IsFinal(wb.Status.Phase) && !lifecycle.Resumable(&wb.Status):
		return nil, finished(wb)
	}
	if ref := g.trainJobRefusal(ctx, wb); ref != nil {
		return nil, ref
	}
	return wb, nil
}

// cached is the binding in the cache that accepts the token hashing to hash
// at now, or nil: an index lookup, no API call.
func (g *Gate) cached(ctx context.Context, hash string, now time.Time) (*tetherv1.WorkerBinding, error) {
	var list tetherv1.WorkerBindingList
	if err := g.cache.List(ctx, &list, client.MatchingFields{TokenHashIndex: hash}); err != nil {
		return nil, err
	}
	return findByHash(list.Items, hash, now), nil
}

func findByHash(items []tetherv1.WorkerBinding, hash string, now time.Time) *tetherv1.WorkerBinding {
	var found *tetherv1.WorkerBinding
	for i := range items {
		if TokenAccepted(&items[i], hash, now) {
			found = &items[i]
		}
	}
	return found
}

// TokenAccepted reports whether the token hashing to hash is good for wb at
// now: its current token, or the one its last reissue replaced while that
// overlap lasts. Hashes are compared in constant time.
func TokenAccepted(wb *tetherv1.WorkerBinding, hash string, now time.Time) bool {
	if subtle.ConstantTimeCompare([]byte(wb.Spec.TokenSHA256), []byte(hash)) == 1 {
		return true
	}
	p := wb.Spec.PreviousToken
	return p != nil && now.Before(p.ValidUntil.Time) && subtle.ConstantTimeCompare([]byte(p.SHA256), []byte(hash)) == 1
}

// checkIdentity refuses a request whose claimed job, worker or pod is not the
// binding's: a token is good for one job's worker in one of its own pods,
// and the request's pod token (podtoken.go) must prove that pod.
func (g *Gate) checkIdentity(ctx context.Context, r *http.Request, wb *tetherv1.WorkerBinding, jobID, workerID string, pod binding.PodIdentity) (*corev1.Pod, *Refusal) {
	if jobID != wb.Spec.JobID || workerID != wb.Spec.WorkerID {
		return nil, Refuse(http.StatusForbidden, binding.ErrForbidden, "identity_mismatch",
			"this token belongs to another job or worker")
	}
	if ref := g.provePod(ctx, r, wb, pod.Name, pod.UID); ref != nil {
		return nil, ref
	}
	if pod.Namespace != wb.Namespace || pod.Name == "" || pod.UID == "" {
		return nil, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch",
			"pod %s/%s is not in the binding's namespace", pod.Namespace, pod.Name)
	}
	p, err := g.pod(ctx, pod.Namespace, pod.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch", "pod %s/%s does not exist", pod.Namespace, pod.Name)
		}
		return nil, Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "reading pod %s: %v", pod.Name, err)
	}
	if !injectedPodOf(wb, p, pod.UID) {
		return nil, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch",
			"pod %s/%s is not an injected trainer pod of TrainJob %s (one its JobSet made, labeled %s=%s, that Tether's pod webhook injected for job id %s)",
			pod.Namespace, pod.Name, wb.Spec.TrainJobName, names.BindLabel, names.BindValue, wb.Spec.JobID)
	}
	return p, nil
}

// injectedPodOf says whether p is pod uid, a trainer pod of wb's TrainJob
// injected for wb's job id. What proves the injection is not the status
// annotation alone, which anyone who may create pods can write, but that
// the pod was created with tether.dev/bind=true: the ValidatingAdmissionPolicy
// tether-bound-pods lets only the Job controller create such a pod, and
// nobody add the label or change the annotation later, and every such pod
// passed Tether's pod webhook (it selects on the label), which wrote the
// annotation.
func injectedPodOf(wb *tetherv1.WorkerBinding, p *corev1.Pod, uid string) bool {
	var status struct {
		JobID string `json:"jobID"`
	}
	_ = json.Unmarshal([]byte(p.Annotations[names.PodStatusAnnotation]), &status)
	return string(p.UID) == uid && jobconfig.IsBound(p.Labels) && p.Labels[trainjob.JobSetNameLabel] == wb.Spec.TrainJobName &&
		status.JobID == wb.Spec.JobID
}

// pod reads a trainer pod from the cache, or from the API server when the
// cache has not seen it yet (a sidecar can start before the watch delivers
// its pod).
func (g *Gate) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p := &corev1.Pod{}
	key := types.NamespacedName{Namespace: ns, Name: name}
	err := g.cache.Get(ctx, key, p)
	if apierrors.IsNotFound(err) && g.live != nil {
		err = g.live.Get(ctx, key, p)
	}
	return p, err
}

// boundRank is the pod's node rank, refused when the binding does not bind
// that node (settings nodes=primary, or a rank beyond MaxBoundNodes or the
// job's node count).
func boundRank(wb *tetherv1.WorkerBinding, pod *corev1.Pod) (int32, *Refusal) {
	r, err := trainjob.Rank(pod)
	if err != nil {
		return 0, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_mismatch", "%v", err)
	}
	switch {
	case r >= binding.MaxBoundNodes:
		return 0, Refuse(http.StatusForbidden, binding.ErrForbidden, "node_not_bound",
			"pod %s is node %d; a binding binds at most %d nodes", pod.Name, r, binding.MaxBoundNodes)
	case r > 0 && lifecycle.Settings(&wb.Spec).Nodes == jobconfig.NodesPrimary:
		return 0, Refuse(http.StatusForbidden, binding.ErrForbidden, "node_not_bound",
			"pod %s is node %d and the binding binds node 0 only (%s=%s)", pod.Name, r, names.NodesAnnotation, jobconfig.NodesPrimary)
	case wb.Status.NodeCount > 0 && int32(r) >= wb.Status.NodeCount:
		return 0, Refuse(http.StatusForbidden, binding.ErrForbidden, "node_not_bound",
			"pod %s is node %d of a job of %d nodes", pod.Name, r, wb.Status.NodeCount)
	}
	return int32(r), nil
}

// finished refuses a request for a final binding.
func finished(wb *tetherv1.WorkerBinding) *Refusal {
	return Refuse(http.StatusGone, binding.ErrBindingFinished, "finished",
		"binding %s/%s is %s (%s)", wb.Namespace, wb.Name, wb.Status.Phase, wb.Status.Reason)
}
