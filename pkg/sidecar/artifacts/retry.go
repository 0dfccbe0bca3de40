package artifacts

import (
	"context"
	"fmt"
	"time"
)

// retry runs op until it succeeds, fails permanently, ctx ends or the
// attempts are exhausted. op gets the attempt number (1-based).
func (u *Uploader) retry(ctx context.Context, name string, op func(attempt int) error) (int, error) {
	var attempt int
	for attempt = 1; ; attempt++ {
		err := op(attempt)
		if err == nil {
			return attempt, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return attempt, &FileError{Path: name, Attempts: attempt, Err: fmt.Errorf("%w (during: %v)", cerr, err),
				Hint: "the sync was stopped (deadline or shutdown) before the file was verified"}
		}
		transient, hint := classify(err, u.cfg.StallTimeout)
		if !transient {
			return attempt, &FileError{Path: name, Attempts: attempt, Permanent: true, Err: err, Hint: hint}
		}
		if attempt >= u.cfg.MaxAttempts {
			h := "the binding server did not accept it; check that it is reachable from the pod (TETHER_SERVER_URL) and its logs. The file is reported missing; the next sync round, if any, tries again"
			if hint != "" {
				h = hint + "; " + h
			}
			return attempt, &FileError{Path: name, Attempts: attempt, Err: err, Hint: h}
		}
		d := u.backoffAfter(attempt)
		u.log.Debug("upload attempt failed; retrying", "path", name, "attempt", attempt, "error", err, "retryIn", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt, &FileError{Path: name, Attempts: attempt, Err: fmt.Errorf("%w (last error: %v)", ctx.Err(), err),
				Hint: "the sync was stopped (deadline or shutdown) before the file was verified"}
		case <-t.C:
		}
	}
}

// backoffAfter is the delay after the given failed attempt: full jitter over
// an exponentially growing cap.
func (u *Uploader) backoffAfter(attempt int) time.Duration { return u.backoff.After(attempt) }
