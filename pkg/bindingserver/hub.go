package bindingserver

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/pkg/binding"
)

// workerKey names one node's worker: the binding and the node's rank.
type workerKey struct {
	binding types.NamespacedName
	rank    int32
}

func (k workerKey) String() string { return fmt.Sprintf("%s[node %d]", k.binding, k.rank) }

// workerState is what the server remembers of a worker between writes.
type workerState struct {
	namespace, trainJob string
	// podUID is the pod whose session this is.
	podUID        string
	interval      time.Duration
	lastHeartbeat time.Time
	lastSeq       uint64
	progress      *binding.Progress
	steps         stepClock
	checkpoint    *binding.Checkpoint
	uploadedBytes int64
	artifactError string
	phase         string
	// lastWrite is when this worker's last heartbeat was taken in this
	// session (zero: none yet, so the next is written at once).
	lastWrite time.Time
	// lost is true once HeartbeatLost was recorded for the current silence.
	lost bool
	// phaseWriteQueued is true from a heartbeat that queued the write of a
	// phase to leave (Pending, Registered) until a write of the binding ends.
	phaseWriteQueued bool
	// lastCommandID is the last command pushed.
	lastCommandID string
	session       *session
}

// hub holds one session per worker and what is known of each worker.
//
// Its lock guards only which workers exist (by binding); each worker's
// state has a lock of its own. A heartbeat then takes the hub's lock for
// reading, never behind a scan of all workers (the liveness loop, a
// scrape), and scans copy one worker at a time: with 10,000 sessions a
// scan under one lock held every heartbeat behind it for milliseconds.
type hub struct {
	mu sync.RWMutex
	// bindings are the workers of each binding, in no order (a binding
	// has a few nodes: a lookup scans them).
	bindings map[types.NamespacedName][]*workerEntry
	// onForget drops what others keep per worker (skipped reports) once
	// the hub forgets it; called with the hub's lock held.
	onForget func(workerKey)

	// paceMu guards pace, each binding's status-write pacing (pacing.go).
	// Lock order: mu before paceMu.
	paceMu sync.Mutex
	pace   map[types.NamespacedName]*writePace
}

// workerEntry is one worker's state and the lock that guards it.
type workerEntry struct {
	key workerKey
	mu  sync.Mutex
	st  workerState
}

func newHub() *hub {
	return &hub{bindings: map[types.NamespacedName][]*workerEntry{}, pace: map[types.NamespacedName]*writePace{}}
}

// lookup is the worker's entry; the caller holds h.mu.
func (h *hub) lookup(key workerKey) *workerEntry {
	for _, e := range h.bindings[key.binding] {
		if e.key.rank == key.rank {
			return e
		}
	}
	return nil
}

func (h *hub) entry(key workerKey) *workerEntry {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.lookup(key)
}

// attach makes sess the worker's session and returns the one it replaces.
func (h *hub) attach(key workerKey, sess *session, init func() *workerState) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.lookup(key)
	if e == nil {
		e = &workerEntry{key: key, st: *init()}
		h.bindings[key.binding] = append(h.bindings[key.binding], e)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.st.session
	e.st.session = sess
	return old
}

// current is the worker's session, or nil.
func (h *hub) current(key workerKey) *session {
	e := h.entry(key)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.session
}

// detach forgets sess if it is still the worker's session.
func (h *hub) detach(key workerKey, sess *session) {
	h.update(key, func(st *workerState) {
		if st.session == sess {
			st.session = nil
		}
	})
}

// get copies the worker's state.
func (h *hub) get(key workerKey) (workerState, bool) {
	e := h.entry(key)
	if e == nil {
		return workerState{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st, true
}

// forget drops the worker. Readers copy a binding's workers under the read
// lock, so its slice is edited in place.
func (h *hub) forget(key workerKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.onForget != nil {
		h.onForget(key)
	}
	workers := slices.DeleteFunc(h.bindings[key.binding], func(e *workerEntry) bool { return e.key.rank == key.rank })
	if len(workers) > 0 {
		h.bindings[key.binding] = workers
		return
	}
	delete(h.bindings, key.binding)
	h.paceMu.Lock()
	delete(h.pace, key.binding)
	h.paceMu.Unlock()
}

// stateSnapshot is a copy of one worker's state, for a reader that must not
// hold its lock.
type stateSnapshot struct {
	key workerKey
	workerState
	connected bool
}

func (e *workerEntry) snapshot() stateSnapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return stateSnapshot{key: e.key, workerState: e.st, connected: e.st.session != nil}
}

// entries appends every worker's entry to buf: a scan then copies one
// worker at a time (workerEntry.snapshot), holding no lock in between, and
// reuses its buffer from one scan to the next.
func (h *hub) entries(buf []*workerEntry) []*workerEntry {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, workers := range h.bindings {
		buf = append(buf, workers...)
	}
	return buf
}

// update runs f on the worker's state under the worker's lock; f must not
// call the hub.
func (h *hub) update(key workerKey, f func(*workerState)) {
	if e := h.entry(key); e != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		f(&e.st)
	}
}

// workersOf returns the keys of the binding's workers this replica knows.
func (h *hub) workersOf(b types.NamespacedName) []workerKey {
	h.mu.RLock()
	defer h.mu.RUnlock()
	workers := h.bindings[b]
	out := make([]workerKey, len(workers))
	for i, e := range workers {
		out[i] = e.key
	}
	return out
}

func (h *hub) sessions() []*session {
	var out []*session
	for _, e := range h.entries(nil) {
		if st := e.snapshot(); st.session != nil {
			out = append(out, st.session)
		}
	}
	return out
}

func (h *hub) closeAll(code int, reason string) {
	for _, s := range h.sessions() {
		s.close(code, reason)
	}
}

// closeCodeName is a metric label for a close code.
func closeCodeName(code int) string {
	switch code {
	case binding.CloseProtocolError:
		return "protocol_error"
	case binding.CloseReplaced:
		return "replaced"
	case binding.CloseRevoked:
		return "revoked"
	case binding.CloseFinished:
		return "finished"
	case binding.CloseHeartbeatTimeout:
		return "heartbeat_timeout"
	case binding.CloseTokenExpired:
		return "token_expired"
	case binding.CloseRateLimited:
		return "rate_limited"
	case websocket.CloseGoingAway:
		return "going_away"
	case websocket.CloseMessageTooBig:
		return "too_big"
	case websocket.CloseNormalClosure:
		return "normal"
	default:
		return "connection_lost"
	}
}
