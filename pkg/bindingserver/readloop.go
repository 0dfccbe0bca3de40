package bindingserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// Frame limits (docs/protocol.md, "Limits"), well above what a correct
// sidecar sends, so only a broken or hostile peer meets them.
const (
	// FramesPerInterval is the sustained frame rate a session may send per
	// heartbeat interval: a correct sidecar sends one heartbeat, now and then
	// a commandAck and at most two finishing frames.
	FramesPerInterval = 5
	// FrameBurst is how many frames a session may send at once. It stays
	// below the session's send queue (16 frames), so a flood meets this
	// limit, with its own close code, before the queue fills with acks.
	FrameBurst = 10
)

// newFrameLimiter is a session's token bucket: FramesPerInterval per
// heartbeat interval, FrameBurst at once.
func newFrameLimiter(interval time.Duration) *rate.Limiter {
	if interval <= 0 {
		interval = time.Second
	}
	return rate.NewLimiter(rate.Limit(float64(FramesPerInterval)/interval.Seconds()), FrameBurst)
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
			phase, code := s.heartbeat(sess, hb)
			if code != 0 {
				return code
			}
			if err := sess.writeAck(binding.Ack{Seq: hb.Seq, ServerTime: s.opts.Now(), Phase: phase}); err != nil {
				return websocket.CloseAbnormalClosure
			}
		case binding.FrameFinishing:
			s.finishing(ctx, sess, f.Finishing)
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

// finishing records a worker's finishing frame: the signal, then its scan's
// unverified and skipped entries. The trainer's last progress line goes
// with this write: a heartbeat carrying it may be paced past the binding's
// end.
func (s *Server) finishing(ctx context.Context, sess *session, fin *binding.Finishing) {
	var ws workerState
	s.hub.update(sess.key, func(st *workerState) {
		if fin.Progress != nil && st.podUID == sess.podUID {
			st.progress = fin.Progress
		}
		ws = *st
	})
	if _, err := s.updateStatus(ctx, sess.key.binding, func(st *tetherv1.WorkerBindingStatus) bool {
		progressed := fin.Progress != nil && ws.podUID == sess.podUID &&
			lifecycle.Heartbeat(st, sess.key.rank, sess.podUID, s.opts.Now(), int64(ws.lastSeq), apiProgress(&ws))
		finishing := lifecycle.Finishing(st, sess.key.rank, sess.podUID, fin.Reason) || progressed
		// The first finishing frame (the signal) carries no scan.
		skipped := fin.SkippedCount > 0 && lifecycle.SkippedReported(st, fin.Skipped, fin.SkippedCount)
		return lifecycle.FlushUnverified(st, sess.key.rank, fin.Unverified, fin.UnverifiedCount, fin.ArtifactError) || finishing || skipped
	}); err != nil {
		sess.log().Error(err, "recording Finishing")
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
