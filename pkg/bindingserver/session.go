package bindingserver

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"

	"github.com/tether-dev/tether/pkg/binding"
)

const writeWait = 10 * time.Second

// session is one worker's WebSocket connection. Its reader goroutine is
// the only goroutine a session keeps: frames are written under writeMu by
// whoever sends them (the reader for acks), pings and close frames with
// gorilla's WriteControl (safe alongside other writes) from a timer's
// short-lived goroutine. Ten thousand idle sessions then cost one parked
// goroutine each, not two.
type session struct {
	key workerKey
	// podUID is the registered pod the session speaks for.
	podUID string
	conn   *websocket.Conn
	// tokenHash is the hash of the token the session was opened with: once
	// the binding no longer accepts it (reissued, overlap over), the
	// liveness check closes the session with CloseTokenExpired.
	tokenHash string
	// log is built on first use: most sessions never log, and a logger
	// with values costs an encoder per session.
	logOnce sync.Once
	logger  logr.Logger
	base    logr.Logger
	podName string

	// frames bounds the frame rate; acks are the commands awaiting an answer
	// (readloop.go, acks.go).
	frames *rate.Limiter
	acks   sentCommands

	// writeMu serializes data frames (gorilla allows one writer at a time).
	writeMu sync.Mutex
	// ping sends the next ping when it fires.
	ping *time.Timer

	// lastFrame is when the session was opened or last read a frame (Unix
	// nanoseconds): a session silent for takeoverSilence intervals may be
	// replaced.
	lastFrame atomic.Int64

	mu        sync.Mutex
	closeCode int // set by close; 0 while open
	// closeSent is closed once the close frame was written (or failed).
	closeSent chan struct{}
}

// debug logs at V(1) without building the session's logger when V(1) is off.
func (s *session) debug(msg string, kv ...any) {
	if s.base.V(1).Enabled() {
		s.log().V(1).Info(msg, kv...)
	}
}

func (s *session) log() logr.Logger {
	s.logOnce.Do(func() {
		s.logger = s.base.WithValues("binding", s.key.binding.String(), "node", s.key.rank, "pod", s.podName)
	})
	return s.logger
}

// close sends the worker a close frame and ends the session: the reader,
// blocked on the peer, is woken by an expired read deadline.
func (s *session) close(code int, reason string) {
	s.mu.Lock()
	first := s.closeCode == 0
	if first {
		s.closeCode = code
	}
	s.mu.Unlock()
	if !first {
		return
	}
	// WriteControl waits for a stuck peer up to its deadline: never on the
	// caller's goroutine (the liveness loop closes many sessions).
	go func() {
		defer close(s.closeSent)
		msg := websocket.FormatCloseMessage(code, reason)
		_ = s.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
		// Unblock the reader, which is waiting on the peer.
		_ = s.conn.NetConn().SetReadDeadline(time.Now())
	}()
}

// closedWith is the code close was called with, or 0.
func (s *session) closedWith() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeCode
}

// write sends one frame; a worker that does not take it within writeWait
// is disconnected rather than allowed to hold server memory.
func (s *session) write(f binding.Frame) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeWait))
	if err := s.conn.WriteJSON(f); err != nil {
		s.close(binding.CloseProtocolError, "write failed")
		return err
	}
	return nil
}

// ackBuffers hold acks while they are written (AppendAckFrame): one per
// writer at a time, not one per session.
var ackBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

// writeAck sends the ack of a heartbeat, as write would (the same bytes,
// gorilla's WriteJSON's newline included) without its allocations.
func (s *session) writeAck(a binding.Ack) error {
	bp := ackBuffers.Get().(*[]byte)
	defer ackBuffers.Put(bp)
	b, err := binding.AppendAckFrame((*bp)[:0], a)
	if err != nil {
		*bp = b[:0]
		s.close(binding.CloseProtocolError, "write failed")
		return err
	}
	b = append(b, '\n')
	*bp = b[:0]
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_ = s.conn.SetWriteDeadline(time.Now().Add(writeWait))
	if err := s.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		s.close(binding.CloseProtocolError, "write failed")
		return err
	}
	return nil
}

// push sends a frame from a goroutine other than the reader (commands):
// on its own goroutine, so a slow worker never holds up the caller.
func (s *session) push(f binding.Frame) bool {
	if s.closedWith() != 0 {
		return false
	}
	go func() { _ = s.write(f) }()
	return true
}

// startPings pings every interval, measuring the round trip, until the
// session is closed.
func (s *Server) startPings(sess *session, interval time.Duration) {
	ping := func() {
		if sess.closedWith() != 0 {
			return
		}
		var payload [8]byte
		binary.BigEndian.PutUint64(payload[:], uint64(time.Now().UnixNano()))
		if err := sess.conn.WriteControl(websocket.PingMessage, payload[:], time.Now().Add(writeWait)); err != nil {
			// The reader sees the broken connection (or its read deadline).
			return
		}
		sess.mu.Lock()
		t := sess.ping
		sess.mu.Unlock()
		t.Reset(interval)
	}
	sess.mu.Lock()
	sess.ping = time.AfterFunc(interval, ping)
	sess.mu.Unlock()
}

// silentFor reports whether the session has read no frame for d.
func (s *session) silentFor(d time.Duration) bool {
	return time.Since(time.Unix(0, s.lastFrame.Load())) > d
}
