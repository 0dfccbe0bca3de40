package bindingserver

import (
	"context"
	"math"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/pkg/binding"
)

// Heartbeat status writes, per binding and per replica:
//
//   - transitions (a phase to leave, a lost heartbeat resumed, a new upload
//     error, skipped entries) are written at once;
//   - the first heartbeat of a session too, so that other replicas see at
//     once that this one holds the worker, unless this replica wrote the
//     binding less than StatusInterval ago: a session opened again and
//     again (a sidecar's reconnects, or anyone with the job's token in a
//     loop) then costs no more writes than its data changing would;
//   - reported data that changed (progress, uploaded bytes) at most once per
//     StatusInterval;
//   - liveness alone at most once per LivenessWriteInterval while the
//     replica's Lease vouches for its sessions, else once per StatusInterval
//     as before there were Leases.
//
// While the Lease vouches, the last two kinds go through one pacer that
// writes at most StatusWriteRate bindings a second, oldest due first, and
// only with what transitions left of that budget (a transition takes a
// token when one is there, never waits for one): a mass reconnect's
// transitions then delay progress instead of adding to it. At
// 10,000 bindings each then gets its turn about every 10 minutes instead of
// every StatusInterval, and kube-apiserver sees a bounded rate whatever the
// number of sessions or a mass reconnect after a rolling restart.

// writePace is one binding's heartbeat-status pacing on this replica.
type writePace struct {
	// writtenAt is when this replica last queued a write of the binding.
	writtenAt time.Time
	// dirty is true when reported data changed since.
	dirty bool
	// paced is true while the binding waits in the pacer's queue.
	paced bool
	// replica is the Lease name the last write recorded ("": none).
	replica string
}

// paceRules are the intervals a pacing decision depends on.
type paceRules struct {
	status, liveness time.Duration
	// vouched is true while the replica's Lease vouches for its sessions;
	// replica is the name a write records then ("" when not vouched).
	vouched bool
	replica string
}

func (r paceRules) due(p *writePace, now time.Time) bool {
	age := now.Sub(p.writtenAt)
	liveness := r.status
	if r.vouched {
		liveness = r.liveness
	}
	return (p.dirty && age >= r.status) || age >= liveness
}

type writeDecision int

const (
	writeNone writeDecision = iota
	// writeNow queues the write at once.
	writeNow
	// writePaced queues the binding in the pacer.
	writePaced
)

// noteHeartbeat decides what a heartbeat of binding b means for its status:
// urgent is a transition to write at once; opened says it is the first of
// a session; changed says reported data changed.
func (h *hub) noteHeartbeat(b types.NamespacedName, now time.Time, urgent, opened, changed bool, r paceRules) writeDecision {
	h.paceMu.Lock()
	defer h.paceMu.Unlock()
	p := h.pace[b]
	if p == nil {
		p = &writePace{}
		h.pace[b] = p
	}
	p.dirty = p.dirty || changed
	if opened {
		// Written recently by this replica, the write is due with the data
		// (the node's new session is data then, not a transition).
		recent := !p.writtenAt.IsZero() && p.replica == r.replica && now.Sub(p.writtenAt) < r.status
		urgent = urgent || !recent
		p.dirty = true
	}
	// A Lease gained or lost is a transition: the binding must name the
	// Lease that vouches for it (or none), or the controller would time the
	// node's liveness by the wrong rule.
	urgent = urgent || p.replica != r.replica
	switch {
	case urgent:
		p.writtenAt, p.dirty, p.replica = now, false, r.replica
		return writeNow
	case p.paced || !r.due(p, now):
		return writeNone
	case !r.vouched:
		p.writtenAt, p.dirty, p.replica = now, false, r.replica
		return writeNow
	}
	p.paced = true
	return writePaced
}

// takePaced is the pacer giving b its turn: it reports whether b is still
// due (a transition may have written it meanwhile) and records the write.
func (h *hub) takePaced(b types.NamespacedName, now time.Time, r paceRules) bool {
	h.paceMu.Lock()
	defer h.paceMu.Unlock()
	p := h.pace[b]
	if p == nil || !p.paced {
		return false
	}
	p.paced = false
	if !r.due(p, now) {
		return false
	}
	p.writtenAt, p.dirty, p.replica = now, false, r.replica
	return true
}

// pacedQueue is the pacer's FIFO. A binding is in it at most once while its
// writePace says paced, so it holds at most one entry per binding this
// replica holds (plus the few a forgotten binding leaves behind).
type pacedQueue struct {
	mu    sync.Mutex
	items []types.NamespacedName
	ready chan struct{}
}

func newPacedQueue() *pacedQueue { return &pacedQueue{ready: make(chan struct{}, 1)} }

func (q *pacedQueue) push(b types.NamespacedName) {
	q.mu.Lock()
	q.items = append(q.items, b)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop waits for the oldest entry; false once ctx ends.
func (q *pacedQueue) pop(ctx context.Context) (types.NamespacedName, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			b := q.items[0]
			q.items[0] = types.NamespacedName{}
			q.items = q.items[1:]
			if len(q.items) == 0 {
				q.items = nil // let the backing array go
			}
			q.mu.Unlock()
			return b, true
		}
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return types.NamespacedName{}, false
		case <-q.ready:
		}
	}
}

func (q *pacedQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// paceRules are the server's rules now.
func (s *Server) paceRules(now time.Time) paceRules {
	r := paceRules{status: s.opts.StatusInterval, liveness: s.opts.LivenessWriteInterval, vouched: s.lease.Vouching(now)}
	if r.vouched {
		r.replica = s.lease.Name()
	}
	return r
}

// runPacer hands paced bindings to the status writers, at most
// StatusWriteRate a second less the transitions written, until ctx ends.
func (s *Server) runPacer(ctx context.Context) {
	lim := s.writeBudget
	for {
		b, ok := s.paced.pop(ctx)
		if !ok {
			return
		}
		if err := lim.Wait(ctx); err != nil {
			return
		}
		if s.hub.takePaced(b, s.opts.Now(), s.paceRules(s.opts.Now())) {
			s.writes.Add(b)
		}
	}
}

// progressChanged reports whether a heartbeat's progress differs from the
// last one's (a heartbeat without progress changes nothing).
func progressChanged(last, hb *binding.Progress) bool {
	if hb == nil {
		return false
	}
	if last == nil {
		return true
	}
	return !sameInt(last.Step, hb.Step) || !sameFloat(last.Epoch, hb.Epoch) || !sameFloat(last.Loss, hb.Loss) ||
		!sameFloat(last.Fraction, hb.Fraction) || !last.UpdatedAt.Equal(hb.UpdatedAt)
}

func sameInt(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func sameFloat(a, b *float64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b || math.IsNaN(*a) && math.IsNaN(*b))
}
