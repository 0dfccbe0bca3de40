package endpoint

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
)

// BackendRetryAfter is the Retry-After of a 503 the Handler sends when the
// backend slows down or cannot be read: S3 sends no Retry-After of its own.
const BackendRetryAfter = 2 * time.Second

// SlowDownError is what an Authorizer returns to refuse a request that is
// over its token's rate: answered with 503 SlowDown and Retry-After (S3's
// answer to a client that sends too fast, which S3 clients retry).
type SlowDownError struct {
	RetryAfter time.Duration
	Message    string
}

func (e *SlowDownError) Error() string {
	return fmt.Sprintf("slow down (retry after %s): %s", e.RetryAfter, e.Message)
}

// SlowDown returns a *SlowDownError.
func SlowDown(after time.Duration, format string, args ...any) error {
	return &SlowDownError{RetryAfter: after, Message: fmt.Sprintf(format, args...)}
}

// setRetryAfter puts a Retry-After (whole seconds, at least 1) on every 503:
// d if set, else BackendRetryAfter.
func setRetryAfter(h http.Header, e *apiError, d time.Duration) {
	if e.status != http.StatusServiceUnavailable {
		return
	}
	if d <= 0 {
		d = BackendRetryAfter
	}
	h.Set("Retry-After", strconv.Itoa(max(1, int((d+time.Second-1)/time.Second))))
}

// backendReadError answers a backend HEAD that failed: retry after
// Retry-After, as SlowDown if the storage said so.
func backendReadError(err error) *apiError {
	if errors.Is(err, objects.ErrSlowDown) {
		return &apiError{http.StatusServiceUnavailable, "SlowDown",
			"the artifact storage asks to slow down (S3 SlowDown or ServiceUnavailable): retry after Retry-After"}
	}
	return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable", "the store cannot be read now; retry after Retry-After"}
}
