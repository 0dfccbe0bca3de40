package artifacts

import (
	"context"
	"errors"
	"fmt"
	"time"
)

type changeEndsAttemptsKey struct{}

// withChangeEndsAttempts marks ctx as a sync's that runs while the trainer
// may still write: a file that changed while it was read is not retried.
func withChangeEndsAttempts(ctx context.Context) context.Context {
	return context.WithValue(ctx, changeEndsAttemptsKey{}, true)
}

func changeEndsAttempts(ctx context.Context) bool {
	v, _ := ctx.Value(changeEndsAttemptsKey{}).(bool)
	return v
}

// retry runs op until it succeeds, fails permanently, ctx ends or the
// attempts are exhausted (in a final flush with a deadline: until the
// deadline). op gets a context carrying a Retry-After hint and the attempt
// number (1-based); a server's Retry-After lengthens the backoff.
func (u *Uploader) retry(ctx context.Context, name string, op func(ctx context.Context, attempt int) error) (int, error) {
	untilDeadline := retriesUntilDeadline(ctx)
	var attempt int
	var lastHint string
	for attempt = 1; ; attempt++ {
		actx, ra := withRetryAfter(ctx)
		err := op(actx, attempt)
		if err == nil {
			return attempt, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return attempt, u.stopped(ctx, name, attempt, cerr, err, lastHint)
		}
		transient, hint := classify(err, u.cfg.StallTimeout)
		if !transient {
			return attempt, &FileError{Path: name, Attempts: attempt, Permanent: true, Err: err, Hint: hint}
		}
		if errors.Is(err, errChanged) && changeEndsAttempts(ctx) {
			// Reopened at once, a file still being written could be taken
			// half-way in a pause: it waits for its next close, or to settle.
			return attempt, &FileError{Path: name, Attempts: attempt, Err: err, Hint: hint}
		}
		lastHint = hint
		if attempt >= u.cfg.MaxAttempts && !untilDeadline {
			h := "the binding server did not accept it; check that it is reachable from the pod (TETHER_SERVER_URL) and its logs. The file is reported missing"
			if final, _ := ctx.Value(finalFlushKey{}).(bool); !final {
				h += "; the next sync round tries again"
			}
			if hint != "" {
				h = hint + "; " + h
			}
			return attempt, &FileError{Path: name, Attempts: attempt, Err: err, Hint: h}
		}
		d := u.backoffAfter(attempt)
		if after := ra.take(); after > d {
			d = after
		}
		u.log.Debug("upload attempt failed; retrying", "path", name, "attempt", attempt, "error", err, "retryIn", d.String())
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt, u.stopped(ctx, name, attempt, ctx.Err(), err, hint)
		case <-t.C:
		}
	}
}

// stopped is the error of a file whose retries ctx ended: in a final flush
// it says what the platform team can change, with the last failure's hint.
func (u *Uploader) stopped(ctx context.Context, name string, attempt int, cause, last error, hint string) *FileError {
	h := "the sync was stopped (deadline or shutdown) before the file was verified"
	if final, _ := ctx.Value(finalFlushKey{}).(bool); final {
		h = "the final flush was retrying it until its budget ended (TETHER_FLUSH_BUDGET, within the pod's terminationGracePeriodSeconds): " +
			"give the pod a longer terminationGracePeriodSeconds, or fix what made the attempts fail"
	}
	if hint != "" {
		h = hint + "; " + h
	}
	return &FileError{Path: name, Attempts: attempt, Err: fmt.Errorf("%w (last error: %v)", cause, last), Hint: h}
}

// backoffAfter is the delay after the given failed attempt: full jitter over
// an exponentially growing cap.
func (u *Uploader) backoffAfter(attempt int) time.Duration { return u.backoff.After(attempt) }
