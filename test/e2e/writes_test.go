package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// writeCounter counts the writes to one WorkerBinding (the MODIFIED events
// of a watch on it): what a job costs the control plane in API writes.
type writeCounter struct {
	mu      sync.Mutex
	n       int
	started time.Time
	stop    context.CancelFunc
	done    chan struct{}
}

// countWrites starts counting the writes to binding ns/name.
func (e *env) countWrites(t *testing.T, ns, name string) *writeCounter {
	t.Helper()
	wc, err := client.NewWithWatch(e.c.Config, client.Options{Scheme: e.c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := wc.Watch(ctx, &tetherv1.WorkerBindingList{}, client.InNamespace(ns),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &writeCounter{started: time.Now(), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if ev.Type == watch.Modified {
					c.mu.Lock()
					c.n++
					c.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(c.Stop)
	return c
}

// steadyWrites counts the writes to binding ns/name over d (the job
// heartbeating, no transition expected) and logs them per minute: what one
// job costs the control plane in API writes while it trains.
func (e *env) steadyWrites(t *testing.T, ns, name string, d time.Duration) float64 {
	t.Helper()
	c := e.countWrites(t, ns, name)
	time.Sleep(d)
	n, perMinute := c.PerMinute()
	c.Stop()
	logf("%s/%s: %d status writes in %s of steady heartbeats (%.1f/min)", ns, name, n, d, perMinute)
	return perMinute
}

// Stop ends the count (idempotent).
func (c *writeCounter) Stop() {
	c.stop()
	<-c.done
}

// PerMinute is the writes counted so far per minute of counting.
func (c *writeCounter) PerMinute() (writes int, perMinute float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, float64(c.n) / time.Since(c.started).Minutes()
}
