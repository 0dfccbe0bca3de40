package server

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

const writeWait = 10 * time.Second

// session is one worker's WebSocket connection. Only its writer goroutine
// writes to conn (gorilla allows one concurrent writer).
type session struct {
	key workerKey
	// podUID is the registered pod the session speaks for.
	podUID string
	conn   *websocket.Conn
	// tokenHash is the hash of the token the session was opened with: once
	// the binding no longer accepts it (reissued, overlap over), the
	// liveness check closes the session with CloseTokenExpired.
	tokenHash string
	log       logr.Logger
	send      chan binding.Frame

	// frames bounds the frame rate; acks are the commands awaiting an answer
	// (ratelimit.go, acks.go).
	frames *rate.Limiter
	acks   sentCommands

	closeOnce sync.Once
	closing   chan closeRequest
	done      chan struct{}

	mu        sync.Mutex
	closeCode int // set by close; 0 while open
}

type closeRequest struct {
	code   int
	reason string
}

// close asks the writer to send a close frame and end the session.
func (s *session) close(code int, reason string) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closeCode = code
		s.mu.Unlock()
		s.closing <- closeRequest{code, reason}
	})
}

// closedWith is the code close was called with, or 0.
func (s *session) closedWith() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeCode
}

// push queues a frame; a worker too slow to drain its queue is disconnected
// rather than allowed to grow server memory.
func (s *session) push(f binding.Frame) bool {
	select {
	case s.send <- f:
		return true
	default:
		s.close(binding.CloseProtocolError, "send queue full")
		return false
	}
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
	p, ref := s.checkIdentity(ctx, wb, r.Header.Get(binding.HeaderJobID), r.Header.Get(binding.HeaderWorkerID), pod)
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
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader has answered the client already.
		s.metrics.refusals.WithLabelValues("bad_upgrade").Inc()
		return
	}
	key := workerKey{types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}, rank}
	interval := heartbeatInterval(wb)
	token, _ := binding.TokenFromHeader(r.Header) // authenticate parsed it already
	sess := &session{key: key, podUID: pod.UID, conn: conn, tokenHash: token.Hash(),
		log:  s.log.WithValues("binding", key.binding.String(), "node", rank, "pod", pod.Name),
		send: make(chan binding.Frame, 16), closing: make(chan closeRequest, 1), done: make(chan struct{})}
	var lastSeq uint64
	if n := lifecycle.Node(&wb.Status, rank); n != nil && n.PodUID == pod.UID {
		lastSeq = uint64(n.LastSeq)
	}
	st, old := s.hub.attach(key, sess, func() *workerState {
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
	}
	_ = st
	s.metrics.sessionsOpened.Inc()
	// A command that arrived while the worker was away is pushed now.
	s.pushPendingCommand(ctx, key, nil)
	sess.log.V(1).Info("session opened", "interval", interval)

	go s.writeLoop(sess, interval)
	// The session outlives this handler: returning lets net/http release the
	// request's state, which thousands of idle sessions would otherwise hold.
	go func() {
		code := s.readLoop(s.baseCtx, sess, interval)
		s.hub.detach(key, sess)
		sess.close(code, closeCodeName(code))
		<-sess.done
		s.metrics.sessionsClosed.WithLabelValues(closeCodeName(code)).Inc()
		sess.log.V(1).Info("session closed", "code", code)
	}()
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

// writeLoop is the session's only writer: queued frames, pings that measure
// the round trip, and the close frame.
func (s *Server) writeLoop(sess *session, interval time.Duration) {
	defer close(sess.done)
	defer sess.conn.Close()
	ping := time.NewTicker(interval)
	defer ping.Stop()
	var payload [8]byte
	for {
		select {
		case f := <-sess.send:
			_ = sess.conn.SetWriteDeadline(time.Now().Add(writeWait))
			if err := sess.conn.WriteJSON(f); err != nil {
				sess.closeOnce.Do(func() {})
				return
			}
		case <-ping.C:
			binary.BigEndian.PutUint64(payload[:], uint64(time.Now().UnixNano()))
			if err := sess.conn.WriteControl(websocket.PingMessage, payload[:], time.Now().Add(writeWait)); err != nil {
				sess.closeOnce.Do(func() {})
				return
			}
		case req := <-sess.closing:
			msg := websocket.FormatCloseMessage(req.code, req.reason)
			_ = sess.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			// Unblock the reader, which is waiting on the peer.
			_ = sess.conn.SetReadDeadline(time.Now())
			return
		}
	}
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
		_, data, err := conn.ReadMessage()
		if err != nil {
			return s.readError(ctx, sess, err)
		}
		if !sess.frames.Allow() {
			sess.log.Info("closing session: frames over the rate limit", "perInterval", FramesPerInterval, "burst", FrameBurst)
			s.metrics.refusals.WithLabelValues("frame_rate").Inc()
			return binding.CloseRateLimited
		}
		f, err := binding.DecodeFrame(data)
		if err != nil {
			sess.log.Info("closing session: bad frame", "error", err.Error())
			s.metrics.refusals.WithLabelValues("bad_frame").Inc()
			return binding.CloseProtocolError
		}
		_ = conn.SetReadDeadline(time.Now().Add(deadline))
		switch f.Type {
		case binding.FrameHeartbeat:
			hb := f.Heartbeat
			if hb.Seq <= lastSeq {
				sess.log.Info("closing session: out-of-order heartbeat", "seq", hb.Seq, "last", lastSeq)
				s.metrics.refusals.WithLabelValues("out_of_order").Inc()
				return binding.CloseProtocolError
			}
			lastSeq = hb.Seq
			phase, code := s.heartbeat(ctx, sess, hb)
			if code != 0 {
				return code
			}
			sess.push(binding.Frame{Type: binding.FrameAck, Ack: &binding.Ack{Seq: hb.Seq, ServerTime: s.opts.Now(), Phase: phase}})
		case binding.FrameFinishing:
			fin := f.Finishing
			if _, err := s.updateStatus(ctx, sess.key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
				finishing := lifecycle.Finishing(st, sess.key.rank, sess.podUID, fin.Reason)
				// The first finishing frame (the signal) carries no scan.
				skipped := fin.SkippedCount > 0 && lifecycle.SkippedReported(st, fin.Skipped, fin.SkippedCount)
				return lifecycle.FlushUnverified(st, sess.key.rank, fin.Unverified, fin.UnverifiedCount, fin.ArtifactError) || finishing || skipped
			}); err != nil {
				sess.log.Error(err, "recording Finishing")
			}
		case binding.FrameCommandAck:
			if !sess.acks.take(f.CommandAck.ID) {
				s.metrics.refusals.WithLabelValues("unsolicited_ack").Inc()
				sess.log.V(1).Info("dropping an ack for a command this session was not sent", "id", f.CommandAck.ID)
				continue
			}
			s.commandAcked(ctx, sess, f.CommandAck)
		default:
			sess.log.Info("closing session: frame type not allowed from a worker", "type", f.Type)
			s.metrics.refusals.WithLabelValues("bad_frame").Inc()
			return binding.CloseProtocolError
		}
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
		sess.log.Info("closing session: frame over the size limit", "limit", binding.MaxFrameSize)
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
	var write, wasLost bool
	var phase string
	s.hub.update(key, func(st *workerState) {
		st.lastHeartbeat = now
		if hb.Seq > st.lastSeq {
			st.lastSeq = hb.Seq
		}
		if hb.Progress != nil {
			st.progress = hb.Progress
		}
		st.uploadedBytes = hb.UploadedBytes
		// A new upload failure is worth a write of its own.
		newError := hb.ArtifactError != st.artifactError
		st.artifactError = hb.ArtifactError
		wasLost = st.lost
		st.lost = false
		phase = st.phase
		write = wasLost || newError || phase == "" || phase == string(tetherv1.PhasePending) || phase == string(tetherv1.PhaseRegistered) ||
			now.Sub(st.lastWrite) >= s.opts.StatusInterval
		if write {
			st.lastWrite = now
		}
	})
	s.metrics.heartbeats.Inc()
	write = s.skipped.note(key, hb.Skipped, hb.SkippedCount) || write
	if write {
		// Written by the status writers, never on the session's reader:
		// a slow API server must not delay acks or starve pongs.
		s.writes.Add(key.binding)
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
	wb, err := s.updateStatus(ctx, key, func(status *tetherv1.WorkerBindingStatus) bool {
		changed := false
		for _, b := range beats {
			if lifecycle.Heartbeat(status, b.rank, b.podUID, b.lastHeartbeat, int64(b.lastSeq), toAPIProgress(b.progress)) {
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
		s.hub.update(workerKey{key, b.rank}, func(st *workerState) { st.phase = string(wb.Status.Phase) })
	}
	return nil
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

// markLost records HeartbeatLost once per silence.
func (s *Server) markLost(ctx context.Context, key workerKey, msg string) {
	first := false
	s.hub.update(key, func(st *workerState) {
		first = !st.lost
		st.lost = true
	})
	if !first {
		return
	}
	s.metrics.heartbeatsLost.Inc()
	if _, err := s.updateStatus(ctx, key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
		return lifecycle.HeartbeatLost(st, key.rank, msg)
	}); err != nil {
		s.log.Error(err, "recording HeartbeatLost", "binding", key.binding.String(), "node", key.rank)
		return
	}
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
