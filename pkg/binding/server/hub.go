package server

import (
	"fmt"
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
type hub struct {
	mu     sync.Mutex
	states map[workerKey]*workerState
	// onForget drops what others keep per worker (skipped reports) once
	// the hub forgets it; called with the hub's lock held.
	onForget func(workerKey)
	// pace is each binding's status-write pacing (pacing.go).
	pace map[types.NamespacedName]*writePace
}

func newHub() *hub {
	return &hub{states: map[workerKey]*workerState{}, pace: map[types.NamespacedName]*writePace{}}
}

// attach makes sess the worker's session and returns the one it replaces.
func (h *hub) attach(key workerKey, sess *session, init func() *workerState) (*workerState, *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.states[key]
	if st == nil {
		st = init()
		h.states[key] = st
	}
	old := st.session
	st.session = sess
	return st, old
}

// detach forgets sess if it is still the worker's session.
func (h *hub) detach(key workerKey, sess *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st := h.states[key]; st != nil && st.session == sess {
		st.session = nil
	}
}

func (h *hub) state(key workerKey) *workerState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.states[key]
}

// get copies the worker's state.
func (h *hub) get(key workerKey) (workerState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.states[key]
	if st == nil {
		return workerState{}, false
	}
	return *st, true
}

func (h *hub) forget(key workerKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.states, key)
	if h.onForget != nil {
		h.onForget(key)
	}
	for k := range h.states {
		if k.binding == key.binding {
			return
		}
	}
	delete(h.pace, key.binding)
}

// snapshot copies the states for a reader that must not hold the lock.
type stateSnapshot struct {
	key workerKey
	workerState
	connected bool
}

func (h *hub) snapshot() []stateSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]stateSnapshot, 0, len(h.states))
	for k, st := range h.states {
		out = append(out, stateSnapshot{key: k, workerState: *st, connected: st.session != nil})
	}
	return out
}

// update runs f on the worker's state under the lock.
func (h *hub) update(key workerKey, f func(*workerState)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st := h.states[key]; st != nil {
		f(st)
	}
}

// workersOf returns the keys of the binding's workers this replica knows.
func (h *hub) workersOf(b types.NamespacedName) []workerKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []workerKey
	for k := range h.states {
		if k.binding == b {
			out = append(out, k)
		}
	}
	return out
}

func (h *hub) sessions() []*session {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*session
	for _, st := range h.states {
		if st.session != nil {
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
