package retry

import (
	"math/rand/v2"
	"time"
)

// DefaultBackoffInitial is a Backoff's first ceiling when none is given.
const DefaultBackoffInitial = 500 * time.Millisecond

// Backoff computes retry delays: exponential growth from initial to max with
// "full jitter", i.e. a delay drawn uniformly from (0, min(max, initial·2^n)],
// so that the sidecars of a large job that lost the server at the same moment
// do not come back in lockstep. The binding session and the uploader each
// choose their initial and max.
//
// It is written here rather than taken from a library because none fits:
// k8s.io/apimachinery's wait.Backoff is out of bounds (the sidecar never
// compiles against k8s.io, internal/archtest), its jitter only lengthens a
// delay (d to d·(1+jitter)) rather than spreading it down to zero, and
// cenkalti/backoff randomises around the exponential value (±factor), keeps
// its attempt count inside the value, so it has no After(n) for a caller
// that counts its own attempts concurrently, and would be one more
// dependency of the sidecar for a dozen lines.
//
// A Backoff is not safe for concurrent use.
type Backoff struct {
	initial, max time.Duration
	attempt      int
	// randN returns a uniform value in [0, n); nil means math/rand/v2.
	randN func(n int64) int64
}

// NewBackoff returns a Backoff; initial <= 0 means DefaultBackoffInitial, and
// limit is at least initial.
func NewBackoff(initial, limit time.Duration) *Backoff {
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if limit < initial {
		limit = initial
	}
	return &Backoff{initial: initial, max: limit}
}

// Ceiling is the upper bound of the next delay.
func (b *Backoff) Ceiling() time.Duration { return b.ceiling(b.attempt) }

func (b *Backoff) ceiling(doublings int) time.Duration {
	d := b.initial
	for i := 0; i < doublings && d < b.max; i++ {
		d *= 2
	}
	if d > b.max || d <= 0 { // d <= 0: overflow
		d = b.max
	}
	return d
}

// Next returns the delay before the next attempt and counts the attempt.
func (b *Backoff) Next() time.Duration {
	d := b.draw(b.ceiling(b.attempt))
	if b.attempt < 64 {
		b.attempt++
	}
	return d
}

// After is the delay after the n-th consecutive failure (n >= 1) without
// counting anything, for a caller that counts its own attempts. It is safe
// for concurrent use.
func (b *Backoff) After(n int) time.Duration { return b.draw(b.ceiling(min(max(n-1, 0), 64))) }

func (b *Backoff) draw(ceil time.Duration) time.Duration {
	randN := b.randN
	if randN == nil {
		randN = rand.Int64N
	}
	return time.Duration(randN(int64(ceil))) + 1
}

// Reset starts over from initial, after a success.
func (b *Backoff) Reset() { b.attempt = 0 }
