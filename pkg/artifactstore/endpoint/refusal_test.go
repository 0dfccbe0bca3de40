package endpoint

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/binding"
)

// Every refused request is reported with its reason: the Authorizer's own,
// or the error code; a 503 always carries Retry-After, a token over its rate
// gets the limiter's delay; a HEAD of a missing key is not a refusal.
func TestRefusalsAreReportedWithReasons(t *testing.T) {
	var mu sync.Mutex
	var reasons []string
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()}, func(h *Handler, _ *httptest.Server) {
		next := h.Authorize
		h.Authorize = func(ctx context.Context, token binding.Token) (Job, error) {
			switch string(token) {
			case tokenNone:
				return Job{}, &AuthError{Status: http.StatusUnauthorized, Reason: "trainjob_deleted", Message: "TrainJob ml/a was deleted"}
			case tokenB:
				return Job{}, SlowDown(3*time.Second, "over the token's rate")
			}
			return next(ctx, token)
		}
		h.OnRefused = func(r string) {
			mu.Lock()
			reasons = append(reasons, r)
			mu.Unlock()
		}
	})
	for _, tc := range []struct {
		method, token, key string
		status             int
		retryAfter         string
	}{
		{http.MethodPut, tokenNone, "/job-a/x", http.StatusUnauthorized, ""},
		{http.MethodPut, tokenB, "/job-b/x", http.StatusServiceUnavailable, "3"},
		{http.MethodPut, tokenDown, "/job-a/x", http.StatusServiceUnavailable, "2"},
		{http.MethodPut, tokenA, "/job-b/x", http.StatusForbidden, ""},
		{http.MethodHead, tokenA, "/job-a/missing", http.StatusNotFound, ""},
	} {
		resp := e.raw(tc.method, "/tether-artifacts"+tc.key, tc.token, strings.NewReader("x"), 1, nil)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.retryAfter {
			t.Errorf("%s %s: %d Retry-After %q, want %d %q", tc.method, tc.key, resp.StatusCode, resp.Header.Get("Retry-After"), tc.status, tc.retryAfter)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(reasons, ","), "trainjob_deleted,rate_limited,service_unavailable,access_denied"; got != want {
		t.Errorf("refusal reasons %s, want %s", got, want)
	}
}
