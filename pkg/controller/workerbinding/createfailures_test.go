package workerbinding

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// countingEvents answers every List with its events and counts the Lists.
type countingEvents struct {
	client.Reader
	lists  atomic.Int32
	events []corev1.Event
	block  chan struct{} // nil: answer at once
}

func (c *countingEvents) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	c.lists.Add(1)
	if c.block != nil {
		<-c.block
	}
	list.(*corev1.EventList).Items = append([]corev1.Event(nil), c.events...)
	return nil
}

func TestFailedCreateReadsAreSharedPerNamespace(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	reads := failedCreateReads{clock: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	live := &countingEvents{events: []corev1.Event{{InvolvedObject: corev1.ObjectReference{Name: "a-node-0"}}}, block: make(chan struct{})}
	ctx := context.Background()

	// Concurrent callers for one namespace wait for the one read in flight.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if ev, err := reads.read(ctx, live, "ns"); err != nil || len(ev) != 1 {
				t.Errorf("read %v, %v", ev, err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(live.block)
	wg.Wait()
	if n := live.lists.Load(); n != 1 {
		t.Fatalf("8 concurrent reads of one namespace listed %d times, want 1", n)
	}
	if _, err := reads.read(ctx, live, "other"); err != nil || live.lists.Load() != 2 {
		t.Fatalf("another namespace: %v, %d lists, want its own", err, live.lists.Load())
	}
	mu.Lock()
	now = now.Add(failedCreateShare)
	mu.Unlock()
	if _, err := reads.read(ctx, live, "ns"); err != nil || live.lists.Load() != 3 {
		t.Fatalf("after failedCreateShare: %v, %d lists, want a new read", err, live.lists.Load())
	}
	reads.mu.Lock()
	defer reads.mu.Unlock()
	if _, ok := reads.byNS["other"]; ok {
		t.Error("an expired namespace's read is still held")
	}
}
