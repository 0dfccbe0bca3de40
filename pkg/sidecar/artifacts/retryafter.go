package artifacts

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// maxRetryAfter caps the wait a server's Retry-After can impose on one
// attempt; a final flush's deadline bounds the total anyway.
const maxRetryAfter = time.Minute

type retryAfterKey struct{}

// retryAfterHint carries the Retry-After of an attempt's last answer from
// the transport (below minio-go, which drops response headers from its
// errors) back to the retry loop.
type retryAfterHint struct{ d atomic.Int64 }

func withRetryAfter(ctx context.Context) (context.Context, *retryAfterHint) {
	h := &retryAfterHint{}
	return context.WithValue(ctx, retryAfterKey{}, h), h
}

// take returns the recorded delay and clears it.
func (h *retryAfterHint) take() time.Duration { return time.Duration(h.d.Swap(0)) }

// noteRetryAfter records a 429's or 503's Retry-After (seconds or an HTTP
// date) on the request's hint, if the request has one.
func noteRetryAfter(req *http.Request, resp *http.Response) {
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusTooManyRequests {
		return
	}
	h, _ := req.Context().Value(retryAfterKey{}).(*retryAfterHint)
	if h == nil {
		return
	}
	if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		h.d.Store(int64(min(d, maxRetryAfter)))
	}
}

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}

type finalFlushKey struct{}

// withFinalFlush marks ctx as a final flush's: a transient failure is then
// retried until ctx's deadline instead of MaxAttempts times, since nothing
// comes after it.
func withFinalFlush(ctx context.Context) context.Context {
	return context.WithValue(ctx, finalFlushKey{}, true)
}

// retriesUntilDeadline reports whether ctx is a final flush's with a deadline.
func retriesUntilDeadline(ctx context.Context) bool {
	_, hasDeadline := ctx.Deadline()
	final, _ := ctx.Value(finalFlushKey{}).(bool)
	return final && hasDeadline
}
