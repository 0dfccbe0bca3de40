package controlplane

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultShutdownDelay is --shutdown-delay's default: long enough for the
// endpoints controller's update to reach kube-proxy and the API server's
// Service resolution (well under a second on a healthy cluster; a write
// that conflicts and is retried takes longer), short against the chart's
// 30 s terminationGracePeriodSeconds.
const DefaultShutdownDelay = 5 * time.Second

// drain is a replica's shutdown: when the process is told to stop, it first
// fails readiness and keeps serving for the delay, then stops. The kubelet
// sends SIGTERM while the endpoints controller removes the pod from its
// Services; without the delay the replica closed its ports at once and a
// caller still routed to it (the API server calling a webhook, a sidecar
// opening a session) met "connection refused": an admission failed during
// a rolling update (e2e scenario 7).
type drain struct {
	draining atomic.Bool
	delay    time.Duration
}

// run returns a context that ends delay after stop does; from the moment
// stop ends, ready fails.
func (d *drain) run(stop context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(stop))
	go func() {
		select {
		case <-stop.Done():
		case <-ctx.Done():
			return
		}
		d.draining.Store(true)
		select {
		case <-time.After(d.delay):
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// ready fails while the replica drains.
func (d *drain) ready() error {
	if d.draining.Load() {
		return fmt.Errorf("shutting down: draining for %s (--shutdown-delay) so that no Service routes here any more before the ports close", d.delay)
	}
	return nil
}
