package workerauth

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tether-dev/tether/pkg/binding"
)

// Input limits (docs/protocol.md, "Limits"). Each is well above what a
// correct sidecar sends, so only a broken or hostile peer meets one.
const (
	// ControlRate and ControlBurst bound registrations and session opens
	// per token (per second): a sidecar registers once per start and opens
	// sessions with backoff (base 0.5 s), each costing API reads and writes.
	ControlRate  = 2
	ControlBurst = 20

	// ArtifactRate and ArtifactBurst bound artifact requests per token (per
	// second). A sidecar's peak is 2,000 small files per second, each a
	// HEAD and a PUT, plus one presign request per file in direct mode:
	// 6,000 requests per second. The limit leaves two thirds on top.
	ArtifactRate  = 10000
	ArtifactBurst = 20000

	// UnknownRate and UnknownBurst bound, per source address, the
	// registrations and session opens with a token no binding in the cache
	// holds: a made-up token, a dead one, or a binding created a moment ago
	// (which the cache has within milliseconds). Only real tokens get a
	// bucket of their own, so a flood of made-up tokens spends its own
	// address's budget and never a real job's.
	UnknownRate  = 2
	UnknownBurst = 20

	// maxTrackedTokens bounds the per-token limiters held in memory (real
	// tokens only: one per live binding); tokens beyond it share one
	// limiter per class.
	maxTrackedTokens = 50000
	// maxTrackedAddresses bounds the per-address limiters for unknown
	// tokens; addresses beyond it share one.
	maxTrackedAddresses = 10000
	// tokenIdle is how long a token's limiter is kept after its last use.
	tokenIdle = 2 * time.Minute

	// liveLookupRate bounds the API server reads the gate makes for a
	// token or TrainJob its cache does not know (created a moment ago),
	// so a flood of unknown tokens cannot turn into API calls.
	liveLookupRate  = 20
	liveLookupBurst = 50
)

// requestClass is a kind of request with its own per-token budget.
type requestClass int

const (
	classControl requestClass = iota
	classArtifacts
	// classPodReviews: the pod token reviews a job token causes (podtoken.go).
	classPodReviews
	numClasses
)

func (c requestClass) limits() (rate.Limit, int) {
	switch c {
	case classArtifacts:
		return ArtifactRate, ArtifactBurst
	case classPodReviews:
		return PodReviewRate, PodReviewBurst
	}
	return ControlRate, ControlBurst
}

type tokenKey struct {
	class requestClass
	// id is the token's hash, or the source address for unknown tokens.
	id string
}

type tokenEntry struct {
	lim  *rate.Limiter
	last time.Time
}

// tokenLimits holds one token bucket per id (a real token's hash, or a
// source address) and request class, at most max of them.
type tokenLimits struct {
	mu       sync.Mutex
	m        map[tokenKey]*tokenEntry
	max      int
	limits   func(requestClass) (rate.Limit, int)
	overflow [numClasses]*rate.Limiter
	swept    time.Time
}

// newTokenLimits holds the buckets of real tokens.
func newTokenLimits() *tokenLimits { return newLimits(maxTrackedTokens, requestClass.limits) }

// newAddressLimits holds the buckets of source addresses sending tokens no
// binding holds.
func newAddressLimits() *tokenLimits {
	return newLimits(maxTrackedAddresses, func(requestClass) (rate.Limit, int) { return UnknownRate, UnknownBurst })
}

func newLimits(n int, limits func(requestClass) (rate.Limit, int)) *tokenLimits {
	t := &tokenLimits{m: map[tokenKey]*tokenEntry{}, max: n, limits: limits}
	for c := range t.overflow {
		r, b := limits(requestClass(c))
		t.overflow[c] = rate.NewLimiter(r, b)
	}
	return t
}

// allow takes one request of class for id. When refused, retryAfter is how
// long until the bucket has a token again.
func (t *tokenLimits) allow(class requestClass, id string, now time.Time) (ok bool, retryAfter time.Duration) {
	t.mu.Lock()
	k := tokenKey{class, id}
	e := t.m[k]
	if e == nil {
		if len(t.m) >= t.max && now.Sub(t.swept) > time.Second {
			t.sweep(now)
		}
		if len(t.m) < t.max {
			r, b := t.limits(class)
			e = &tokenEntry{lim: rate.NewLimiter(r, b)}
			t.m[k] = e
		}
	}
	lim := t.overflow[class]
	if e != nil {
		e.last = now
		lim = e.lim
	}
	t.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

func (t *tokenLimits) sweep(now time.Time) {
	t.swept = now
	for k, e := range t.m {
		if now.Sub(e.last) > tokenIdle {
			delete(t.m, k)
		}
	}
}

// Limit is the budget of a register or session request, to be taken
// before Admit: a real token's own budget, or for a token no binding in the
// cache holds, its source address's. Over it, the request is refused with
// 429 and Retry-After. A request without a well-formed token is left to
// Admit, which refuses it.
func (g *Gate) Limit(r *http.Request) *Refusal {
	token, err := binding.TokenFromHeader(r.Header)
	if err != nil {
		return nil
	}
	hash, now := token.Hash(), g.now()
	if g.knownToken(r.Context(), hash, now) {
		ok, after := g.limits.allow(classControl, hash, now)
		if ok {
			return nil
		}
		ref := Refuse(http.StatusTooManyRequests, binding.ErrRateLimited, "rate_limited",
			"more than %d registrations and session opens per second with this token (burst %d); retry after the Retry-After delay",
			ControlRate, ControlBurst)
		ref.RetryAfter = after
		return ref
	}
	ok, after := g.unknown.allow(classControl, sourceAddress(r), now)
	if ok {
		return nil
	}
	ref := Refuse(http.StatusTooManyRequests, binding.ErrRateLimited, "unknown_token_rate_limited",
		"more than %d registrations and session opens per second from this address with tokens no binding holds (burst %d); "+
			"check the token (a TrainJob that was deleted or had its token reissued), then retry after the Retry-After delay",
		UnknownRate, UnknownBurst)
	ref.RetryAfter = after
	return ref
}

// knownToken reports whether a binding in the cache holds the token hashing
// to hash (an index lookup: no API call).
func (g *Gate) knownToken(ctx context.Context, hash string, now time.Time) bool {
	wb, err := g.cached(ctx, hash, now)
	return err == nil && wb != nil
}

// sourceAddress is the request's peer IP address (without the port, so
// one pod's connections share it). Forwarding headers are not trusted:
// sidecars connect to the binding server directly.
func sourceAddress(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// retryAfterSeconds rounds a delay up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
