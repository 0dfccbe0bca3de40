package workerauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// Every rank of a job holds the same job token, so the token says which job
// asks, never which pod: a sidecar that learned another rank's pod UID could
// claim it. Each request therefore also carries the pod's projected
// ServiceAccount token (names.HeaderPodToken, audience
// names.PodTokenAudience), which the kubelet issues to that one pod and
// only its sidecar mounts. The server reviews it with the API server
// (TokenReview), takes the pod's namespace, name and UID from the review,
// and refuses a request whose claimed pod is not the token's
// (pod_token_mismatch). Verdicts are cached by the token's SHA-256 until the
// token expires, so an API server outage does not stop pods that already
// proved themselves (a rotated token is reviewed again: the kubelet rotates
// at 80% of its 600 s, leaving the old one good for 120 s more).
//
// A cached verdict holds only while its pod does: the API server refuses a
// deleted pod's token at review, but a cached verdict is used without one.
// So every use of a cached verdict looks the pod up in the informer cache
// (a map lookup, no API call; the API server only for a pod the cache
// lacks, at most once per podLiveRecheck) and accepts it only while a pod
// of that name with the reviewed UID exists (podAlive); a pod recreated
// under the same name has another UID. A verdict whose pod is gone is marked dead until
// the token would have expired, so its token is refused without reviewing
// it again.

// Limits of the pod token reviews.
const (
	// MaxPodVerdicts bounds the cached verdicts (one per pod token in use:
	// one per running trainer pod, two while the kubelet rotates it).
	MaxPodVerdicts = 20000
	// maxVerdictLife bounds a verdict whatever the token's expiry says.
	maxVerdictLife = time.Hour
	// PodReviewRate and PodReviewBurst bound the reviews one job token may
	// cause per second: a job's pods register at once (up to
	// binding.MaxBoundNodes of them), then each reviews once per rotation.
	// Made-up pod tokens sent with a real job token spend that job's
	// budget, not the others'.
	PodReviewRate  = 5
	PodReviewBurst = 2 * binding.MaxBoundNodes
	// podReviewRate and podReviewBurst bound every review the replica asks
	// the API server for.
	podReviewRate  = 500
	podReviewBurst = 2000
	// podReviewTimeout bounds one review.
	podReviewTimeout = 5 * time.Second
	// podReviewRetryAfter is the Retry-After of a review that could not be
	// made.
	podReviewRetryAfter = 2 * time.Second
	// podLiveRecheck is how long the API server's word that a pod the
	// cache lacks exists is taken (podAlive): at most one read per token
	// per interval, for a pod the cache has not seen yet or never holds
	// (not a trainer pod).
	podLiveRecheck = 5 * time.Second
)

// PodTokenReviewer reviews a pod token for names.PodTokenAudience.
type PodTokenReviewer interface {
	ReviewPodToken(ctx context.Context, token string) (authnv1.TokenReviewStatus, error)
}

// KubePodTokenReviewer asks the API server (create tokenreviews, which the
// control plane's ClusterRole grants).
type KubePodTokenReviewer struct{ Clientset kubernetes.Interface }

// ReviewPodToken creates a TokenReview for the pod token's audience.
func (k KubePodTokenReviewer) ReviewPodToken(ctx context.Context, token string) (authnv1.TokenReviewStatus, error) {
	tr, err := k.Clientset.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{names.PodTokenAudience}}}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.TokenReviewStatus{}, fmt.Errorf("TokenReview: %w", err)
	}
	return tr.Status, nil
}

// Keys of the pod a bound ServiceAccount token names in its user's extra
// (k8s.io/apiserver's serviceaccount.PodNameKey and PodUIDKey).
const (
	podNameExtra = "authentication.kubernetes.io/pod-name"
	podUIDExtra  = "authentication.kubernetes.io/pod-uid"
)

// provenPod is the pod a reviewed pod token belongs to.
type provenPod struct {
	namespace, serviceAccount, name, uid string
	// until is when the verdict stops counting: the token's expiry.
	until time.Time
	// gone says the pod was found deleted (or replaced under its name)
	// after the review: the token is refused until until.
	gone bool
	// liveUntil: the API server confirmed the pod (which the cache did not
	// hold) until then, so it is not asked again before.
	liveUntil time.Time
}

// podProofs reviews pod tokens and remembers the verdicts of authentic ones.
type podProofs struct {
	rev   PodTokenReviewer
	now   func() time.Time
	limit *rate.Limiter

	mu       sync.Mutex
	verdicts map[[sha256.Size]byte]provenPod
	swept    time.Time
}

func newPodProofs(rev PodTokenReviewer, now func() time.Time) *podProofs {
	return &podProofs{rev: rev, now: now, limit: rate.NewLimiter(podReviewRate, podReviewBurst),
		verdicts: map[[sha256.Size]byte]provenPod{}}
}

// podClaim is the pod a request claims to come from, and the token that
// should prove it.
type podClaim struct {
	token string
	// namespace is the binding's: the pod must be in it. name may be empty
	// (artifact requests name the pod by UID only).
	namespace, name, uid string
}

// proveClaim reviews the claim's pod token (or finds its cached verdict)
// and checks that it proves the claimed pod. budget takes one review from
// the job token's own budget (ratelimit.go). A review that cannot be made
// now is a 503 with Retry-After.
func (g *Gate) proveClaim(ctx context.Context, c podClaim, budget func() (bool, time.Duration)) (provenPod, *Refusal) {
	switch {
	case g.pods == nil:
		return provenPod{}, Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "no_pod_reviewer",
			"this binding server cannot review pod tokens (no reviewer configured)")
	case c.token == "":
		return provenPod{}, Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "no_pod_token",
			"no %s header: every request carries the pod's projected ServiceAccount token (audience %s, the file %s names) beside the job's token; "+
				"the pod needs the %s volume Tether's webhook adds, and a sidecar that sends the header (upgrade an older one)",
			names.HeaderPodToken, names.PodTokenAudience, names.EnvPodTokenFile, "tether-pod-token")
	case len(c.token) > binding.MaxPodTokenLength:
		return provenPod{}, Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "malformed_pod_token",
			"%s is longer than %d bytes: it is not a ServiceAccount token", names.HeaderPodToken, binding.MaxPodTokenLength)
	}
	p, cached, ref := g.pods.prove(ctx, c.token, budget)
	if ref != nil {
		return provenPod{}, ref
	}
	if cached {
		// A review proves the pod existed then; a cached verdict must be
		// checked against the pod as it is now.
		if ref := g.podAlive(ctx, c.token, p); ref != nil {
			return provenPod{}, ref
		}
	}
	switch {
	case p.namespace != c.namespace:
		return provenPod{}, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_token_mismatch",
			"the pod token is pod %s/%s's, not a pod in the binding's namespace %s: a sidecar speaks only for its own pod", p.namespace, p.name, c.namespace)
	case c.uid == "":
		return provenPod{}, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_token_mismatch",
			"the request names no pod UID beside its pod token (pod %s/%s's): send the pod's UID (the sidecar does)", p.namespace, p.name)
	case p.uid != c.uid:
		return provenPod{}, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_token_mismatch",
			"the request names pod UID %q, but its pod token is pod %s/%s's (UID %s): a sidecar speaks only for its own pod", c.uid, p.namespace, p.name, p.uid)
	case c.name != "" && p.name != c.name:
		return provenPod{}, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_token_mismatch",
			"the request names pod %s, but its pod token is pod %s/%s's: a sidecar speaks only for its own pod", c.name, p.namespace, p.name)
	}
	return p, nil
}

// prove returns the pod token's cached verdict (cached true), or reviews
// it. A verdict whose pod is known gone refuses the token without a review.
func (pp *podProofs) prove(ctx context.Context, token string, budget func() (bool, time.Duration)) (p provenPod, cached bool, ref *Refusal) {
	key := sha256.Sum256([]byte(token))
	now := pp.now()
	pp.mu.Lock()
	p, ok := pp.verdicts[key]
	pp.mu.Unlock()
	if ok && now.Before(p.until) {
		if p.gone {
			return provenPod{}, true, podGone(p)
		}
		return p, true, nil
	}
	if ok, after := budget(); !ok {
		r := Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "pod_review_limited",
			"more than %d pod token reviews per second with this job's token (burst %d): retry after Retry-After", PodReviewRate, PodReviewBurst)
		r.RetryAfter = after
		return provenPod{}, false, r
	}
	if !pp.limit.Allow() {
		r := Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "pod_review_limited",
			"too many pod tokens are being reviewed on this replica: retry after Retry-After")
		r.RetryAfter = time.Second
		return provenPod{}, false, r
	}
	rctx, cancel := context.WithTimeout(ctx, podReviewTimeout)
	defer cancel()
	st, err := pp.rev.ReviewPodToken(rctx, token)
	if err != nil {
		r := Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "pod_review_unavailable",
			"cannot review the pod token now (%v): retry after Retry-After", err)
		r.RetryAfter = podReviewRetryAfter
		return provenPod{}, false, r
	}
	p, ref = verdictOf(st, token, now)
	if ref != nil {
		return provenPod{}, false, ref
	}
	pp.remember(key, p, now)
	return p, false, nil
}

// podAlive refuses a cached verdict whose pod no longer exists with the
// reviewed UID, and marks it dead. It reads the informer cache (trainer
// pods only), and the API server only when the cache does not have the pod
// as reviewed: a pod created or replaced a moment ago, or not a trainer pod
// at all; those reads share the gate's budget of live lookups, and one
// that confirms the pod holds for podLiveRecheck. Without a cache (unit
// tests of other checks) the verdict stands.
func (g *Gate) podAlive(ctx context.Context, token string, p provenPod) *Refusal {
	if g.cache == nil {
		return nil
	}
	var pod corev1.Pod
	key := client.ObjectKey{Namespace: p.namespace, Name: p.name}
	err := g.cache.Get(ctx, key, &pod, readOnly...)
	switch {
	case err == nil && string(pod.UID) == p.uid:
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "reading pod %s: %v", p.name, err)
	case g.now().Before(p.liveUntil):
		return nil
	}
	if g.live != nil {
		if !g.liveLookups.Allow() {
			r := Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "lookup_limited",
				"pod %s/%s is not in the server's cache and too many pods are being looked up: retry after Retry-After", p.namespace, p.name)
			r.RetryAfter = time.Second
			return r
		}
		live := &metav1.PartialObjectMetadata{}
		live.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		err := g.live.Get(ctx, key, live)
		switch {
		case err == nil && string(live.UID) == p.uid:
			g.pods.confirmLive(token, g.now().Add(podLiveRecheck))
			return nil
		case err != nil && !apierrors.IsNotFound(err):
			return Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "reading pod %s: %v", p.name, err)
		}
	}
	g.pods.markGone(token)
	return podGone(p)
}

// podGone is the refusal of a token whose pod was deleted after its review.
func podGone(p provenPod) *Refusal {
	return Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "pod_gone",
		"the pod token is pod %s/%s's (UID %s), which no longer exists: a pod token dies with its pod", p.namespace, p.name, p.uid)
}

// confirmLive records that the API server confirmed token's pod, until.
func (pp *podProofs) confirmLive(token string, until time.Time) {
	key := sha256.Sum256([]byte(token))
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if v, ok := pp.verdicts[key]; ok {
		v.liveUntil = until
		pp.verdicts[key] = v
	}
}

// markGone marks token's verdict dead. The pod's other token (the one the
// kubelet rotated from, or to) meets the same check at its next use.
func (pp *podProofs) markGone(token string) {
	key := sha256.Sum256([]byte(token))
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if v, ok := pp.verdicts[key]; ok {
		v.gone = true
		pp.verdicts[key] = v
	}
}

// verdictOf reads the pod out of an authentic review.
func verdictOf(st authnv1.TokenReviewStatus, token string, now time.Time) (provenPod, *Refusal) {
	if !st.Authenticated {
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return provenPod{}, Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "pod_token_rejected",
			"the API server does not accept the pod token for audience %s (%s): send the token of the %s volume, which the kubelet keeps current",
			names.PodTokenAudience, truncate(why, 200), "tether-pod-token")
	}
	if !slices.Contains(st.Audiences, names.PodTokenAudience) {
		return provenPod{}, Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, "pod_token_rejected",
			"the pod token is not for audience %s", names.PodTokenAudience)
	}
	var p provenPod
	rest, isSA := strings.CutPrefix(st.User.Username, "system:serviceaccount:")
	p.namespace, p.serviceAccount, _ = strings.Cut(rest, ":")
	names, uids := st.User.Extra[podNameExtra], st.User.Extra[podUIDExtra]
	if !isSA || p.namespace == "" || p.serviceAccount == "" || len(names) != 1 || len(uids) != 1 || names[0] == "" || uids[0] == "" {
		return provenPod{}, Refuse(http.StatusForbidden, binding.ErrForbidden, "pod_token_not_bound",
			"the pod token (user %s) is not a ServiceAccount token bound to a pod: send the projected token of the %s volume, not one made without a pod",
			truncate(st.User.Username, 120), "tether-pod-token")
	}
	p.name, p.uid = names[0], uids[0]
	p.until = now.Add(maxVerdictLife)
	if exp, ok := tokenExpiry(token); ok && exp.Before(p.until) {
		p.until = exp
	}
	return p, nil
}

// tokenExpiry is the exp claim of a JWT the API server has just accepted
// (so its claims are the issuer's).
func tokenExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}

// remember caches a verdict; when MaxPodVerdicts are held, expired ones go
// first, then any (the pod reviews its token again).
func (pp *podProofs) remember(key [sha256.Size]byte, p provenPod, now time.Time) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if len(pp.verdicts) >= MaxPodVerdicts && now.Sub(pp.swept) > time.Second {
		pp.swept = now
		for k, v := range pp.verdicts {
			if !now.Before(v.until) {
				delete(pp.verdicts, k)
			}
		}
	}
	for k := range pp.verdicts {
		if len(pp.verdicts) < MaxPodVerdicts {
			break
		}
		delete(pp.verdicts, k)
	}
	pp.verdicts[key] = p
}

// cached is how many verdicts are held.
func (pp *podProofs) cached() int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return len(pp.verdicts)
}

// provePod checks a register or session request's pod token against the pod
// it claims (name and UID) in wb's namespace.
func (g *Gate) provePod(ctx context.Context, r *http.Request, wb *tetherv1.WorkerBinding, name, uid string) *Refusal {
	token, _ := binding.TokenFromHeader(r.Header) // authenticate parsed it already
	hash := token.Hash()
	_, ref := g.proveClaim(ctx, podClaim{token: r.Header.Get(names.HeaderPodToken), namespace: wb.Namespace, name: name, uid: uid},
		func() (bool, time.Duration) { return g.limits.allow(classPodReviews, hash, g.now()) })
	return ref
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
