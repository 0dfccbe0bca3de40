package binding

import (
	"context"
	"math/rand/v2"
	"time"
)

// Default reconnect backoff of the Client.
const (
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
)

// backoff computes retry delays: exponential growth from initial to max with
// "full jitter", i.e. a delay drawn uniformly from [0, min(max, initial·2^n)],
// so that the sidecars of a large job that lost the server at the same moment
// do not come back in lockstep.
//
// It is written here rather than taken from a library (cenkalti/backoff,
// k8s.io/apimachinery's wait) because it is a dozen lines, the sidecar's
// dependency set is kept deliberately small (and must never reach k8s.io), and
// those libraries default to a ±50% randomisation around the exponential value
// rather than full jitter.
//
// A backoff is not safe for concurrent use.
type backoff struct {
	initial, max time.Duration
	attempt      int
	// randN returns a uniform value in [0, n); nil means math/rand/v2.
	randN func(n int64) int64
}

func newBackoff(initial, max time.Duration) *backoff {
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if max < initial {
		max = initial
	}
	return &backoff{initial: initial, max: max}
}

// ceiling is the upper bound of the next delay.
func (b *backoff) ceiling() time.Duration {
	d := b.initial
	for i := 0; i < b.attempt && d < b.max; i++ {
		d *= 2
	}
	if d > b.max || d <= 0 { // d <= 0: overflow
		d = b.max
	}
	return d
}

// next returns the delay before the next attempt and counts the attempt.
func (b *backoff) next() time.Duration {
	ceil := b.ceiling()
	if b.attempt < 64 {
		b.attempt++
	}
	randN := b.randN
	if randN == nil {
		randN = rand.Int64N
	}
	return time.Duration(randN(int64(ceil) + 1))
}

// reset starts over from initial, after a success.
func (b *backoff) reset() { b.attempt = 0 }

// sleepCtx waits for d or until ctx ends, whichever is first; it returns
// ctx.Err() in the latter case.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
