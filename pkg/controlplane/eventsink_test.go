package controlplane

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// slowSink stands in for the API server's Events endpoint (a unit test has
// none): each call waits for gate to close (nil: does not wait), as creates
// wait on an API server busy with a burst, and fail, when set, answers
// instead.
type slowSink struct {
	gate    chan struct{}
	fail    func(e *corev1.Event, call int) error
	mu      sync.Mutex
	created map[string]int
	calls   atomic.Int64
}

func (s *slowSink) record(e *corev1.Event) (*corev1.Event, error) {
	call := int(s.calls.Add(1))
	if s.gate != nil {
		<-s.gate
	}
	if s.fail != nil {
		if err := s.fail(e, call); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.created == nil {
		s.created = map[string]int{}
	}
	s.created[e.InvolvedObject.Name]++
	return e, nil
}

func (s *slowSink) Create(e *corev1.Event) (*corev1.Event, error)          { return s.record(e) }
func (s *slowSink) Update(e *corev1.Event) (*corev1.Event, error)          { return s.record(e) }
func (s *slowSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) { return s.record(e) }

func (s *slowSink) objects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.created)
}

// burst records one Bound Event about each of n TrainJobs, a few thousand a
// second, through a broadcaster sending to sink, while the API server
// behind it answers nothing (gate); then it opens gate and returns how many
// TrainJobs' Events got through once nothing new arrived for a second.
func burst(t *testing.T, n int, sink record.EventSink, gate chan struct{}, got func() int) int {
	t.Helper()
	b := newEventBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(NewScheme(), corev1.EventSource{Component: eventSource})
	for i := range n {
		ref := &corev1.ObjectReference{Kind: "TrainJob", APIVersion: "trainer.kubeflow.org/v1alpha1", Namespace: "team",
			Name: fmt.Sprintf("job-%05d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}
		rec.Eventf(ref, corev1.EventTypeNormal, "Bound", "bound as job %d", i)
		// Thousands a second, well above a controller's pace: recorded
		// back to back, they would overflow the broadcaster's own queue
		// before any sink is reached.
		time.Sleep(200 * time.Microsecond)
	}
	close(gate)
	last, since := -1, time.Now()
	for time.Since(since) < time.Second {
		if g := got(); g != last {
			last, since = g, time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return last
}

// A burst of 2,000 Events while the API server answers none: client-go's
// sink, one send at a time, gets the 1,001 that wait in and before the
// broadcaster's queue, the rest are dropped; the queued sink holds and
// sends every one.
func TestQueuedEventSinkKeepsABurst(t *testing.T) {
	const n = 2000
	direct := &slowSink{gate: make(chan struct{})}
	if got := burst(t, n, direct, direct.gate, direct.objects); got >= n {
		t.Fatalf("client-go's own path delivered all %d Events: the test no longer shows the loss it guards against", n)
	} else {
		t.Logf("client-go's sink alone: %d of %d Events delivered", got, n)
	}
	inner := &slowSink{gate: make(chan struct{})}
	sink := newQueuedEventSink(inner, logr.Discard(), eventSinkWorkers, eventSinkDepth)
	defer sink.stop(time.Now())
	if got := burst(t, n, sink, inner.gate, inner.objects); got != n {
		t.Fatalf("the queued sink delivered %d of %d Events (dropped: %v)", got, n, testutil.ToFloat64(sink.dropped))
	}
	if d := testutil.ToFloat64(sink.dropped); d != 0 {
		t.Fatalf("dropped counter %v with every Event delivered", d)
	}
}

// A full queue drops and counts; an API server that cannot be reached is
// tried again, one that refuses is not; a stopped sink drops.
func TestQueuedEventSinkBoundsAndRetries(t *testing.T) {
	block := make(chan struct{})
	inner := &slowSink{fail: func(e *corev1.Event, call int) error {
		if e.Reason == "Block" {
			<-block
		}
		return nil
	}}
	sink := newQueuedEventSink(inner, logr.Discard(), 1, 2)
	ev := func(name, reason string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Reason: reason,
			InvolvedObject: corev1.ObjectReference{Namespace: "team", Name: name}}
	}
	_, _ = sink.Create(ev("a", "Block")) // taken by the worker, which blocks
	for inner.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for _, name := range []string{"b", "c", "d"} { // room for 2
		_, _ = sink.Create(ev(name, "Bound"))
	}
	if d := testutil.ToFloat64(sink.dropped); d != 1 {
		t.Fatalf("dropped %v with a queue of 2 and 3 Events waiting, want 1", d)
	}
	close(block)
	sink.stop(time.Now().Add(5 * time.Second))
	if got := inner.objects(); got != 3 {
		t.Fatalf("%d Events sent after the worker was free, want 3 (a, b, c)", got)
	}
	_, _ = sink.Create(ev("e", "Bound"))
	if d := testutil.ToFloat64(sink.dropped); d != 2 {
		t.Fatalf("an Event after stop was not counted dropped (%v)", d)
	}

	unreachable := &slowSink{fail: func(_ *corev1.Event, call int) error {
		if call == 1 {
			return &net.OpError{Op: "dial", Err: errors.New("connection refused")}
		}
		return nil
	}}
	refused := &slowSink{fail: func(e *corev1.Event, _ int) error {
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, e.Name)
	}}
	for _, c := range []struct {
		name  string
		inner *slowSink
		calls int64
	}{{"unreachable once", unreachable, 2}, {"refused", refused, 1}} {
		s := newQueuedEventSink(c.inner, logr.Discard(), 1, 2)
		_, _ = s.Create(ev("x", "Bound"))
		s.stop(time.Now().Add(eventRetryAfter + 5*time.Second))
		if got := c.inner.calls.Load(); got != c.calls {
			t.Errorf("%s: %d sends, want %d", c.name, got, c.calls)
		}
	}
}
