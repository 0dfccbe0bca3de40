package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

const writeWait = 10 * time.Second

// Event reasons of session takeovers (docs/platform.md, Events).
const (
	// ReasonSessionRefused: a session open for a worker whose session is
	// open and heartbeating was refused.
	ReasonSessionRefused = "SessionRefused"
	// ReasonSessionReplaced: a new session of the same pod replaced one
	// that had gone silent.
	ReasonSessionReplaced = "SessionReplaced"
)

// takeoverSilence is how long a worker's session must have sent nothing
// (in heartbeat intervals) before another session of the same pod may
// replace it: a sidecar heartbeats every interval, so a live one is never
// replaced, while one that reconnects after its connection broke (it
// notices within 3 intervals) gets in (issue 24 §3). Below
// MissedHeartbeats, so a takeover happens before the old session is
// declared lost.
const takeoverSilence = 2

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
	// (ratelimit.go, acks.go).
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

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !s.limitRequest(w, r) {
		return
	}
	wb, ref := s.authenticate(ctx, r, r.Header.Get(binding.HeaderPodNamespace))
	if ref != nil {
		s.reject(w, r, ref, nil)
		return
	}
	pod := binding.PodIdentity{Namespace: wb.Namespace, Name: r.Header.Get(binding.HeaderPodName), UID: r.Header.Get(binding.HeaderPodUID)}
	p, ref := s.checkIdentity(ctx, r, wb, r.Header.Get(binding.HeaderJobID), r.Header.Get(binding.HeaderWorkerID), pod)
	if ref != nil {
		s.reject(w, r, ref, wb)
		return
	}
	rank, ref := boundRank(wb, p)
	if ref != nil {
		s.reject(w, r, ref, wb)
		return
	}
	if !s.registered(ctx, wb, rank, pod.UID) {
		s.reject(w, r, refuse(http.StatusConflict, binding.ErrBadRequest, "not_registered",
			"pod %s is not the binding's registered worker: register first", pod.Name), wb)
		return
	}
	key := workerKey{types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}, rank}
	interval := heartbeatInterval(wb)
	if cur := s.hub.current(key); cur != nil && cur.podUID == pod.UID && cur.closedWith() == 0 && !cur.silentFor(takeoverSilence*interval) {
		// Whoever holds the job's token can claim to be the pod: a live
		// session is not handed over (the sidecar's own reconnect comes
		// after its session broke, and so went silent).
		s.refuseTakeover(w, r, wb, cur, pod.Name)
		return
	}
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader has answered the client already.
		s.metrics.refusals.WithLabelValues("bad_upgrade").Inc()
		return
	}
	token, _ := binding.TokenFromHeader(r.Header) // authenticate parsed it already
	sess := &session{key: key, podUID: pod.UID, conn: conn, tokenHash: token.Hash(), base: s.log, podName: pod.Name,
		closeSent: make(chan struct{})}
	sess.lastFrame.Store(time.Now().UnixNano())
	var lastSeq uint64
	if n := lifecycle.Node(&wb.Status, rank); n != nil && n.PodUID == pod.UID {
		lastSeq = uint64(n.LastSeq)
	}
	old := s.hub.attach(key, sess, func() *workerState {
		return &workerState{namespace: wb.Namespace, trainJob: wb.Spec.TrainJobName, lastSeq: lastSeq,
			phase: string(wb.Status.Phase)}
	})
	s.hub.update(key, func(st *workerState) {
		if st.podUID != pod.UID {
			// A replacement pod of the node: what the old one reported is not its.
			st.podUID, st.progress, st.uploadedBytes, st.artifactError, st.lost = pod.UID, nil, 0, "", false
			st.lastHeartbeat = time.Time{}
		}
		st.interval = interval
		// The first heartbeat of every session is written, so other replicas
		// see at once that this one has the worker now.
		st.lastWrite = time.Time{}
		// A command left unanswered by the previous session is sent again.
		st.lastCommandID = ""
	})
	if old != nil {
		old.close(binding.CloseReplaced, "replaced by a newer session of the same worker")
		s.metrics.replaced.Inc()
		if old.podUID == pod.UID {
			s.announceTakeover(wb, old, pod.Name)
		}
	}
	s.metrics.sessionsOpened.Inc()
	// A command that arrived while the worker was away is pushed now.
	s.pushPendingCommand(ctx, key, nil)
	sess.debug("session opened", "interval", interval)

	s.startPings(sess, interval)
	// The session outlives this handler: returning lets net/http release the
	// request's state, which thousands of idle sessions would otherwise hold.
	go func() {
		code := s.readLoop(s.baseCtx, sess, interval)
		s.hub.detach(key, sess)
		sess.close(code, closeCodeName(code))
		sess.mu.Lock()
		sess.ping.Stop()
		sess.mu.Unlock()
		// The close frame has its second to go out, then the connection ends.
		<-sess.closeSent
		_ = sess.conn.Close()
		s.metrics.sessionsClosed.WithLabelValues(closeCodeName(code)).Inc()
		sess.debug("session closed", "code", code)
	}()
}

// silentFor reports whether the session has read no frame for d.
func (s *session) silentFor(d time.Duration) bool {
	return time.Since(time.Unix(0, s.lastFrame.Load())) > d
}

// refuseTakeover answers a session open for a worker whose session (cur)
// is live: 409 SessionActive, counted, and a Warning on the TrainJob, since
// the open came with the job's token from somewhere other than that
// session.
func (s *Server) refuseTakeover(w http.ResponseWriter, r *http.Request, wb *tetherv1.WorkerBinding, cur *session, podName string) {
	ref := refuse(http.StatusConflict, binding.ErrSessionActive, "session_active",
		"node %d's session (pod %s) is open and heartbeating; one session per worker: a sidecar whose connection broke gets in once that session has been silent for %d heartbeat intervals",
		cur.key.rank, cur.podName, takeoverSilence)
	if s.events != nil {
		s.events.Eventf(trainjob.Ref(wb.Namespace, wb.Spec.TrainJobName, ""), nil, corev1.EventTypeWarning, ReasonSessionRefused, lifecycle.EventAction,
			"refused a second session for node %d as pod %s, opened with the job's token while the sidecar's session heartbeats: "+
				"if the sidecar did not open it, someone else holds the token (reissue it by deleting Secret %s)", cur.key.rank, podName, wb.Spec.TokenSecretName)
	}
	s.reject(w, r, ref, wb)
}

// announceTakeover says that a session of the pod replaced old, which had
// gone silent: the sidecar's own reconnect, or someone else with the token.
func (s *Server) announceTakeover(wb *tetherv1.WorkerBinding, old *session, podName string) {
	silent := time.Since(time.Unix(0, old.lastFrame.Load())).Round(time.Second)
	s.log.Info("session replaced by a newer one of the same pod", "binding", old.key.binding.String(), "node", old.key.rank, "pod", podName, "silentFor", silent.String())
	if s.events != nil {
		s.events.Eventf(trainjob.Ref(wb.Namespace, wb.Spec.TrainJobName, ""), nil, corev1.EventTypeWarning, ReasonSessionReplaced, lifecycle.EventAction,
			"node %d's session (pod %s) was replaced by a new one after %s without a frame: the sidecar reconnecting, "+
				"or, if its log shows no reconnect, someone else with the job's token", old.key.rank, podName, silent)
	}
}

// registered reports whether podUID registered as node rank in the
// binding's current attempt, asking the API server when the cache has not
// caught up with a registration that just happened.
func (s *Server) registered(ctx context.Context, wb *tetherv1.WorkerBinding, rank int32, podUID string) bool {
	is := func(st *tetherv1.WorkerBindingStatus) bool {
		n := lifecycle.Node(st, rank)
		return n != nil && n.PodUID == podUID && n.RegisteredTime != nil
	}
	if is(&wb.Status) {
		return true
	}
	if s.live == nil {
		return false
	}
	fresh := &tetherv1.WorkerBinding{}
	if err := s.live.Get(ctx, types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}, fresh); err != nil {
		return false
	}
	return is(&fresh.Status)
}

// readLoop reads frames until the session ends and returns the close code.
func (s *Server) readLoop(ctx context.Context, sess *session, interval time.Duration) int {
	conn := sess.conn
	sess.frames = newFrameLimiter(interval)
	conn.SetReadLimit(binding.MaxFrameSize)
	deadline := time.Duration(s.opts.MissedHeartbeats) * interval
	_ = conn.SetReadDeadline(time.Now().Add(deadline))
	conn.SetPongHandler(func(data string) error {
		if len(data) == 8 {
			sent := int64(binary.BigEndian.Uint64([]byte(data)))
			s.metrics.pingRTT.Observe(time.Since(time.Unix(0, sent)).Seconds())
		}
		return nil
	})
	var lastSeq uint64
	for {
		buf, err := readFrame(conn)
		if err != nil {
			return s.readError(ctx, sess, err)
		}
		if !sess.frames.Allow() {
			sess.log().Info("closing session: frames over the rate limit", "perInterval", FramesPerInterval, "burst", FrameBurst)
			s.metrics.refusals.WithLabelValues("frame_rate").Inc()
			return binding.CloseRateLimited
		}
		f, err := binding.DecodeFrame(buf.Bytes())
		putFrameBuffer(buf) // the frame holds copies of what it needs
		if err != nil {
			sess.log().Info("closing session: bad frame", "error", err.Error())
			s.metrics.refusals.WithLabelValues("bad_frame").Inc()
			return binding.CloseProtocolError
		}
		_ = conn.SetReadDeadline(time.Now().Add(deadline))
		sess.lastFrame.Store(time.Now().UnixNano())
		switch f.Type {
		case binding.FrameHeartbeat:
			hb := f.Heartbeat
			if hb.Seq <= lastSeq {
				sess.log().Info("closing session: out-of-order heartbeat", "seq", hb.Seq, "last", lastSeq)
				s.metrics.refusals.WithLabelValues("out_of_order").Inc()
				return binding.CloseProtocolError
			}
			lastSeq = hb.Seq
			phase, code := s.heartbeat(ctx, sess, hb)
			if code != 0 {
				return code
			}
			if err := sess.writeAck(binding.Ack{Seq: hb.Seq, ServerTime: s.opts.Now(), Phase: phase}); err != nil {
				return websocket.CloseAbnormalClosure
			}
		case binding.FrameFinishing:
			fin := f.Finishing
			// The trainer's last progress line goes with this write: a
			// heartbeat carrying it may be paced past the binding's end.
			var ws workerState
			s.hub.update(sess.key, func(st *workerState) {
				if fin.Progress != nil && st.podUID == sess.podUID {
					st.progress = fin.Progress
				}
				ws = *st
			})
			if _, err := s.updateStatus(ctx, sess.key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
				progressed := fin.Progress != nil && ws.podUID == sess.podUID &&
					lifecycle.Heartbeat(st, sess.key.rank, sess.podUID, s.opts.Now(), int64(ws.lastSeq), toAPIProgress(ws.progress))
				finishing := lifecycle.Finishing(st, sess.key.rank, sess.podUID, fin.Reason) || progressed
				// The first finishing frame (the signal) carries no scan.
				skipped := fin.SkippedCount > 0 && lifecycle.SkippedReported(st, fin.Skipped, fin.SkippedCount)
				return lifecycle.FlushUnverified(st, sess.key.rank, fin.Unverified, fin.UnverifiedCount, fin.ArtifactError) || finishing || skipped
			}); err != nil {
				sess.log().Error(err, "recording Finishing")
			}
		case binding.FrameCommandAck:
			if !sess.acks.take(f.CommandAck.ID) {
				s.metrics.refusals.WithLabelValues("unsolicited_ack").Inc()
				sess.debug("dropping an ack for a command this session was not sent", "id", f.CommandAck.ID)
				continue
			}
			s.commandAcked(ctx, sess, f.CommandAck)
		default:
			sess.log().Info("closing session: frame type not allowed from a worker", "type", f.Type)
			s.metrics.refusals.WithLabelValues("bad_frame").Inc()
			return binding.CloseProtocolError
		}
	}
}

// frameBuffers hold frames while they are read and decoded (decoding copies
// what it keeps): one per reader at a time, not one per session, and no
// fresh buffer per heartbeat as gorilla's ReadMessage makes.
var frameBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledFrame bounds the buffers kept for reuse: heartbeats are a few
// hundred bytes; a rare large frame's buffer goes to the GC.
const maxPooledFrame = 4 << 10

// readFrame reads the next message into a pooled buffer (putFrameBuffer
// returns it), with ReadMessage's errors (the read limit included).
func readFrame(conn *websocket.Conn) (*bytes.Buffer, error) {
	_, r, err := conn.NextReader()
	if err != nil {
		return nil, err
	}
	buf := frameBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		putFrameBuffer(buf)
		return nil, err
	}
	return buf, nil
}

func putFrameBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledFrame {
		frameBuffers.Put(buf)
	}
}

// readError turns a read failure into the session's close code, recording a
// lost heartbeat when the worker went silent.
func (s *Server) readError(ctx context.Context, sess *session, err error) int {
	var ce *websocket.CloseError
	var ne net.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code
	case errors.Is(err, websocket.ErrReadLimit):
		sess.log().Info("closing session: frame over the size limit", "limit", binding.MaxFrameSize)
		s.metrics.refusals.WithLabelValues("too_big").Inc()
		return websocket.CloseMessageTooBig
	case errors.As(err, &ne) && ne.Timeout():
		if code := sess.closedWith(); code != 0 {
			// Our own close (replaced, revoked, ...) unblocked the read.
			return code
		}
		s.markLost(ctx, sess.key, "no heartbeat within the read deadline")
		return binding.CloseHeartbeatTimeout
	default:
		if code := sess.closedWith(); code != 0 {
			// Our own close ended the connection before the peer echoed it:
			// the session ended for that reason, not a lost connection.
			return code
		}
		return websocket.CloseAbnormalClosure
	}
}

// heartbeat records a heartbeat in memory and writes the status when a
// transition happens or the status interval has passed. It returns the phase
// for the ack, or a close code when the binding cannot take heartbeats.
func (s *Server) heartbeat(ctx context.Context, sess *session, hb *binding.Heartbeat) (string, int) {
	key := sess.key
	now := s.opts.Now()
	var urgent, opened, changed, wasLost bool
	var phase string
	s.hub.update(key, func(st *workerState) {
		st.lastHeartbeat = now
		if hb.Seq > st.lastSeq {
			st.lastSeq = hb.Seq
		}
		if progressChanged(st.progress, hb.Progress) {
			changed = true
		}
		if hb.Progress != nil {
			st.progress = hb.Progress
		}
		changed = changed || hb.UploadedBytes != st.uploadedBytes
		st.uploadedBytes = hb.UploadedBytes
		// A new upload failure is worth a write of its own.
		newError := hb.ArtifactError != st.artifactError
		st.artifactError = hb.ArtifactError
		wasLost = st.lost
		st.lost = false
		phase = st.phase
		// A phase to leave is written once per write: heartbeats that come
		// while that write is queued or under way (a slow API server) do
		// not queue it again.
		phaseToLeave := phase == "" || phase == string(tetherv1.PhasePending) || phase == string(tetherv1.PhaseRegistered)
		if phaseToLeave && st.phaseWriteQueued {
			phaseToLeave = false
		} else if phaseToLeave {
			st.phaseWriteQueued = true
		}
		urgent = wasLost || newError || phaseToLeave
		opened = st.lastWrite.IsZero()
		st.lastWrite = now
	})
	s.metrics.heartbeats.Inc()
	// Skipped entries that changed are a transition.
	urgent = s.skipped.note(key, hb.Skipped, hb.SkippedCount) || urgent
	// Heartbeat status is paced per binding, not per node: one write
	// carries every node this replica holds, so a job of many nodes costs
	// no more writes than a job of one (pacing.go).
	switch s.hub.noteHeartbeat(key.binding, now, urgent, opened, changed, s.paceRules(now)) {
	case writeNow:
		// Written by the status writers, never on the session's reader:
		// a slow API server must not delay acks or starve pongs. It uses
		// the paced writes' budget if there is some (pacing.go).
		s.writeBudget.Allow()
		s.writes.Add(key.binding)
	case writePaced:
		s.paced.push(key.binding)
	case writeNone:
	}
	if wasLost {
		s.log.Info("heartbeats resumed", "binding", key.binding.String(), "node", key.rank)
	}
	return phase, 0
}

// maxStatusRetries bounds the retries of one heartbeat-status write (with
// the queue's backoff, 5ms doubling: about 5s in all).
const maxStatusRetries = 10

// statusWriters is how many goroutines write heartbeat status; it bounds the
// binding server's concurrent writes to the API server.
const statusWriters = 4

// runStatusWriters writes queued bindings' heartbeat status until ctx ends.
// The queue coalesces: a binding queued again before its write starts is
// written once, with the latest state.
func (s *Server) runStatusWriters(ctx context.Context) {
	for range statusWriters {
		go func() {
			for {
				key, shutdown := s.writes.Get()
				if shutdown {
					return
				}
				switch err := s.writeHeartbeatStatus(ctx, key); {
				case err == nil || ctx.Err() != nil:
					s.writes.Forget(key)
				case s.writes.NumRequeues(key) >= maxStatusRetries:
					s.clearPhaseWrites(key)
					// Bounded: the worker's next heartbeat queues a fresh write.
					s.log.Error(err, "writing heartbeat status failed; giving up until the next heartbeat",
						"binding", key.String(), "attempts", s.writes.NumRequeues(key)+1)
					s.writes.Forget(key)
				default:
					s.log.Error(err, "writing heartbeat status; will retry", "binding", key.String())
					s.writes.AddRateLimited(key)
				}
				s.writes.Done(key)
			}
		}()
	}
	<-ctx.Done()
	s.writes.ShutDown()
}

// writeHeartbeatStatus writes what the hub knows of the binding's workers'
// heartbeats (every node this replica holds, in one write), and ends their
// sessions if the binding turned out final or deleted.
func (s *Server) writeHeartbeatStatus(ctx context.Context, key types.NamespacedName) error {
	type beat struct {
		rank int32
		workerState
	}
	var beats []beat
	for _, k := range s.hub.workersOf(key) {
		if st, ok := s.hub.get(k); ok && !st.lastHeartbeat.IsZero() {
			beats = append(beats, beat{k.rank, st})
		}
	}
	if len(beats) == 0 {
		return nil
	}
	// The binding names this replica's Lease only while it vouches for the
	// sessions; without one, the heartbeat time alone carries liveness.
	replica := ""
	if s.lease.vouching(s.opts.Now()) {
		replica = s.lease.name()
	}
	wb, err := s.updateStatus(ctx, key, func(status *tetherv1.WorkerBindingStatus) bool {
		changed := false
		for _, b := range beats {
			if lifecycle.Heartbeat(status, b.rank, b.podUID, b.lastHeartbeat, int64(b.lastSeq), toAPIProgress(b.progress)) {
				changed = true
			}
			if lifecycle.SessionHeld(status, b.rank, b.podUID, replica) {
				changed = true
			}
			if lifecycle.UploadReported(status, b.rank, b.podUID, b.uploadedBytes, b.artifactError) {
				changed = true
			}
			if s.skipped.apply(workerKey{key, b.rank}, status) {
				changed = true
			}
		}
		return changed
	})
	switch {
	case apierrors.IsNotFound(err):
		s.closeSessions(key, binding.CloseRevoked, "binding deleted")
		return nil
	case err != nil:
		return err
	case wb.DeletionTimestamp != nil:
		s.closeSessions(key, binding.CloseRevoked, "binding deleted")
	case lifecycle.IsFinal(wb.Status.Phase):
		s.closeSessions(key, binding.CloseFinished, "binding "+string(wb.Status.Phase))
	}
	for _, b := range beats {
		s.hub.update(workerKey{key, b.rank}, func(st *workerState) { st.phase, st.phaseWriteQueued = string(wb.Status.Phase), false })
	}
	return nil
}

// clearPhaseWrites lets the binding's next heartbeats queue their phase
// write again (the last one was given up).
func (s *Server) clearPhaseWrites(b types.NamespacedName) {
	for _, k := range s.hub.workersOf(b) {
		s.hub.update(k, func(st *workerState) { st.phaseWriteQueued = false })
	}
}

// closeSessions closes the sessions of every worker of the binding.
func (s *Server) closeSessions(key types.NamespacedName, code int, reason string) {
	for _, k := range s.hub.workersOf(key) {
		s.closeSession(k, code, reason)
	}
}

func (s *Server) closeSession(key workerKey, code int, reason string) {
	var sess *session
	s.hub.update(key, func(st *workerState) { sess = st.session })
	if sess != nil {
		sess.close(code, reason)
	}
}

// markLost records HeartbeatLost once per silence, with the last heartbeat
// this replica heard (its memory is newer than the binding between writes),
// unless another replica took the session since.
func (s *Server) markLost(ctx context.Context, key workerKey, msg string) {
	first := false
	var last workerState
	s.hub.update(key, func(st *workerState) {
		first = !st.lost
		st.lost = true
		last = *st
	})
	if !first {
		return
	}
	elsewhere := false
	if _, err := s.updateStatus(ctx, key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
		if elsewhere = lifecycle.HeldElsewhere(st, key.rank, s.lease.name()); elsewhere {
			return false
		}
		if n := lifecycle.Node(st, key.rank); n != nil && !last.lastHeartbeat.IsZero() &&
			(n.LastHeartbeatTime == nil || last.lastHeartbeat.After(n.LastHeartbeatTime.Time)) {
			lifecycle.Heartbeat(st, key.rank, last.podUID, last.lastHeartbeat, int64(last.lastSeq), toAPIProgress(last.progress))
		}
		return lifecycle.HeartbeatLost(st, key.rank, msg)
	}); err != nil {
		s.log.Error(err, "recording HeartbeatLost", "binding", key.binding.String(), "node", key.rank)
		return
	}
	if elsewhere {
		s.log.V(1).Info("silent here, but another replica holds the session now", "binding", key.binding.String(), "node", key.rank)
		return
	}
	s.metrics.heartbeatsLost.Inc()
	s.log.Info("heartbeat lost", "binding", key.binding.String(), "node", key.rank, "why", msg)
}

func toAPIProgress(p *binding.Progress) *tetherv1.Progress {
	if p == nil {
		return nil
	}
	out := &tetherv1.Progress{Step: p.Step, Epoch: lifecycle.FormatFloat(p.Epoch), Loss: lifecycle.FormatFloat(p.Loss),
		Fraction: lifecycle.FormatFloat(p.Fraction)}
	if !p.UpdatedAt.IsZero() {
		t := metav1.NewTime(p.UpdatedAt)
		out.UpdatedTime = &t
	}
	return out
}
