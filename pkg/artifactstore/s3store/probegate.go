package s3store

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// ProbeWait is how long a request to a backend that awaits its start-up
// probe (S3Options.AwaitProbe) waits for it before failing with
// ErrNotProbed.
const ProbeWait = 5 * time.Second

// ErrNotProbed is the error of a request made before the start-up probe
// chose how to use the store (S3Options.AwaitProbe).
var ErrNotProbed = errors.New("the artifact store has not answered this replica's start-up probe yet (it is tried again until it does): nothing was done; retry shortly")

// probingKey marks the context of the probe's own requests: they go
// through before Use.
type probingKey struct{}

func probing(ctx context.Context) context.Context { return context.WithValue(ctx, probingKey{}, true) }

// Probed is closed once the backend uses a probe's choice (Use).
func (b *S3Backend) Probed() <-chan struct{} { return b.probed }

// awaitProbed waits, at most ProbeWait, until the backend uses a probe's
// choice, when it awaits one and ctx is not the probe's.
func (b *S3Backend) awaitProbed(ctx context.Context) error {
	if !b.awaitProbe || ctx.Value(probingKey{}) != nil {
		return nil
	}
	select {
	case <-b.probed:
		return nil
	default:
	}
	t := time.NewTimer(ProbeWait)
	defer t.Stop()
	select {
	case <-b.probed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return ErrNotProbed
	}
}

// chosen is the probe's choice, once the backend has one (or does not
// await one: then the zero choice, ETag = MD5 and unconditional writes).
func (b *S3Backend) chosen(ctx context.Context) (Choice, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return Choice{}, err
	}
	if c := b.choice.Load(); c != nil {
		return *c, nil
	}
	return Choice{}, nil
}

// probeGate refuses every request of a backend that awaits its probe
// until the probe chose, but the probe's own. The backend's methods wait
// for the probe first (awaitProbed), before minio-go, which retries a
// failed request up to ten times: the gate is the net under them, and it
// does not wait.
type probeGate struct {
	next http.RoundTripper
	b    *S3Backend
}

func (g probeGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Context().Value(probingKey{}) == nil {
		select {
		case <-g.b.probed:
		default:
			if r.Body != nil {
				_ = r.Body.Close()
			}
			return nil, ErrNotProbed
		}
	}
	return g.next.RoundTrip(r)
}
