package controlplane

import (
	"errors"
	"hash/fnv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
)

const (
	// eventSinkWorkers send Events at once: a burst's Events at the pace
	// of a few creates in flight, not one.
	eventSinkWorkers = 8
	// eventSinkDepth bounds each worker's queue: 8,192 Events in all.
	eventSinkDepth = 1024
	// eventSendTries and eventRetryAfter retry an Event the API server
	// could not be reached for (client-go's sink retried so too).
	eventSendTries  = 3
	eventRetryAfter = 2 * time.Second
)

// queuedEventSink sends Tether's Events to the API server from
// eventSinkWorkers workers, off the broadcaster's goroutine.
//
// Why: client-go's broadcaster hands each Event to its sink from one
// goroutine, and drops every Event that arrives while 1,000 wait for it
// (watch.DropIfChannelFull). One create at a time does not keep up with a
// burst of new bindings on a busy API server: a third of a burst's Bound
// Events were lost (test/performance/controller's bound-events-per-job, 0.66 to 0.77
// for 2,000). Here the broadcaster's goroutine only queues. The Events of
// one name go through one worker, in order (a repeat's patch after its
// create). An Event that finds its worker's queue full is dropped and
// counted (tether_events_dropped_total). No library offers this: client-go's
// sinks are all synchronous.
type queuedEventSink struct {
	inner   record.EventSink
	log     logr.Logger
	queues  []chan func()
	dropped prometheus.Counter
	wg      sync.WaitGroup
	// mu guards closed against a send on a closed queue.
	mu     sync.RWMutex
	closed bool
}

var _ record.EventSink = (*queuedEventSink)(nil)

func newQueuedEventSink(inner record.EventSink, log logr.Logger, workers, depth int) *queuedEventSink {
	s := &queuedEventSink{inner: inner, log: log, dropped: NewEventsDroppedCounter()}
	for range workers {
		q := make(chan func(), depth)
		s.queues = append(s.queues, q)
		s.wg.Go(func() {
			for send := range q {
				send()
			}
		})
	}
	return s
}

// Create implements record.EventSink: it queues the create and answers
// with the Event as sent.
func (s *queuedEventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	e = e.DeepCopy()
	s.enqueue(e, func() (*corev1.Event, error) { return s.inner.Create(e) })
	return e, nil
}

// Update implements record.EventSink.
func (s *queuedEventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	e = e.DeepCopy()
	s.enqueue(e, func() (*corev1.Event, error) { return s.inner.Update(e) })
	return e, nil
}

// Patch implements record.EventSink.
func (s *queuedEventSink) Patch(old *corev1.Event, data []byte) (*corev1.Event, error) {
	old = old.DeepCopy()
	s.enqueue(old, func() (*corev1.Event, error) { return s.inner.Patch(old, data) })
	return old, nil
}

// NewEventsDroppedCounter is tether_events_dropped_total, the Events a
// replica dropped unsent because its send queue was full.
func NewEventsDroppedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_events_dropped_total",
		Help: "Events this replica dropped unsent because its send queue was full.",
	})
}

// enqueue queues send on the worker of e's name, or drops it when that
// worker's queue is full or the sink is stopped.
func (s *queuedEventSink) enqueue(e *corev1.Event, send func() (*corev1.Event, error)) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(e.Namespace + "/" + e.Name))
	q := s.queues[h.Sum32()%uint32(len(s.queues))]
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped.Inc()
		return
	}
	select {
	case q <- func() { s.send(e, send) }:
	default:
		s.dropped.Inc()
	}
}

// send sends one Event, again after eventRetryAfter when the API server
// could not be reached (any error that is not the API server's answer).
func (s *queuedEventSink) send(e *corev1.Event, send func() (*corev1.Event, error)) {
	for try := 1; ; try++ {
		_, err := send()
		var status apierrors.APIStatus
		switch {
		case err == nil:
			return
		case errors.As(err, &status) || try == eventSendTries:
			// Refused (an Event of a terminating namespace, one that
			// exists already) or unreachable for good: dropped, as by
			// client-go's sink.
			s.log.V(1).Info("Event not sent", "reason", e.Reason, "object", e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name, "error", err.Error())
			return
		}
		time.Sleep(eventRetryAfter)
	}
}

// stop stops queueing and waits, at most until deadline, for the queued
// Events to be sent.
func (s *queuedEventSink) stop(deadline time.Time) {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		for _, q := range s.queues {
			close(q)
		}
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
	}
}
