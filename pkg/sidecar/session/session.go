package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/retry"
)

// session is one open WebSocket connection. Only its writer goroutine (the
// one running Client.runSession) writes data frames; others hand frames to it
// through out. Control frames (pong, close) use WriteControl, which gorilla
// allows concurrently.
type session struct {
	conn *websocket.Conn
	out  chan writeRequest
	done chan struct{} // closed when the session has ended

	sentMu sync.Mutex
	sent   []sentHeartbeat // recent heartbeats, for the RTT estimate
}

type sentHeartbeat struct {
	seq uint64
	at  time.Time
}

type writeRequest struct {
	frame binding.Frame
	done  chan error
}

var errSessionClosed = errors.New("session closed")

// send hands f to the session's writer and waits until it was written.
func (s *session) send(ctx context.Context, f binding.Frame) error {
	req := writeRequest{frame: f, done: make(chan error, 1)}
	select {
	case s.out <- req:
	case <-s.done:
		return errSessionClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-s.done:
		select {
		case err := <-req.done:
			return err
		default:
			return errSessionClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) noteSent(seq uint64, at time.Time) {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	if len(s.sent) >= 16 {
		s.sent = append(s.sent[:0], s.sent[1:]...)
	}
	s.sent = append(s.sent, sentHeartbeat{seq, at})
}

// takeSent returns when seq was sent and forgets it and everything older.
func (s *session) takeSent(seq uint64) (time.Time, bool) {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	for i, h := range s.sent {
		if h.seq == seq {
			s.sent = append(s.sent[:0], s.sent[i+1:]...)
			return h.at, true
		}
	}
	return time.Time{}, false
}

// Run registers, then keeps a session open and heartbeats on it until ctx is
// cancelled (it then closes the session with 1000 and returns nil) or the
// binding ends for good (it returns a *PermanentError). Lost connections,
// server errors, CloseProtocolError and CloseHeartbeatTimeout lead to a new
// registration and session after a backoff; CloseReplaced to a new session
// of the same registration (see reclaiming), and to a *PermanentError with
// CloseReplaced only once the server says this pod is no longer the node's.
// Run must not be called twice at once.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("binding client: Run is already running")
	}
	defer c.running.Store(false)

	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, below
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.cfg.Progress != nil || c.cfg.UploadedBytes != nil || c.cfg.ArtifactError != nil || c.cfg.Skipped != nil || c.cfg.Checkpoint != nil {
		go c.sampleLoop(ctx) // not waited for: see Config.Progress
	}
	c.cmds = make(chan commandRequest, commandQueue)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.commandLoop(ctx)
	}()

	bo := retry.NewBackoff(c.cfg.BackoffInitial, c.cfg.BackoffMax)
	// reclaiming: the session was taken over (CloseReplaced). Whoever has
	// the job's token can open one as this pod, so that is no reason to
	// stop: the sidecar opens its session again, without registering (a
	// registration could make a pod that is no longer the node's its pod
	// again), until the server takes it back or says this pod is no longer
	// the node's registered one.
	reclaiming := false
	for {
		if !reclaiming {
			rr, err := c.register(ctx, bo)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err // permanent
			}
			c.log.Info("registered", "job", c.cfg.JobID, "worker", c.cfg.WorkerID, "phase", rr.Phase,
				"lastSeq", rr.LastSeq, "heartbeatInterval", c.HeartbeatInterval())
		}
		healthy, err := c.runSession(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if reclaiming && notRegistered(err) {
			// The node has another pod now: the binding goes on without this one.
			err = &PermanentError{Op: "session", CloseCode: binding.CloseReplaced,
				CloseText: "this pod is no longer the node's registered pod", Response: responseOf(err)}
		}
		if IsPermanent(err) {
			c.log.Error("binding ended", "error", err)
			return err
		}
		var taken *takenOverError
		active := sessionActive(err)
		switch {
		case errors.As(err, &taken):
			c.takeovers.Add(1)
			reclaiming = true
			c.log.Warn("session taken over by another connection with this job's token; opening it again", "reason", taken.text)
		case active:
			// Registered already: only the session is to be opened again.
			reclaiming = true
		case healthy:
			reclaiming = false
		}
		if healthy && taken == nil {
			// Not after a takeover: two sessions of one worker are contention.
			bo.Reset()
		}
		d := c.retryDelay(bo, err)
		if active {
			// The server hands a silent session over after 2 heartbeat
			// intervals and closes it after 3: try often enough to be there.
			d = min(d, c.HeartbeatInterval()/2)
		}
		c.log.Warn("session lost; reconnecting", "error", err, "retryIn", d)
		if retry.Sleep(ctx, d) != nil {
			return nil
		}
	}
}

// runSession opens one session and serves it until it ends. healthy reports
// that the server acknowledged at least one heartbeat, i.e. the backoff can
// start over.
func (c *Client) runSession(ctx context.Context) (healthy bool, err error) {
	conn, err := c.openSession(ctx)
	if err != nil {
		return false, err
	}

	interval := c.HeartbeatInterval()
	readTimeout := 3 * interval
	writeTimeout := min(max(interval, time.Second), 10*time.Second)
	s := &session{conn: conn, out: make(chan writeRequest), done: make(chan struct{})}
	var acked atomic.Bool
	readErr, readerDone := c.startReader(ctx, s, &acked, readTimeout, writeTimeout)

	c.mu.Lock()
	c.sess = s
	c.mu.Unlock()
	if c.sessions.Add(1) > 1 {
		c.log.Info("session reopened", "reconnects", c.Reconnects())
	} else {
		c.log.Info("session open")
	}
	defer func() {
		c.mu.Lock()
		if c.sess == s {
			c.sess = nil
		}
		c.mu.Unlock()
		close(s.done)
		conn.Close()
		<-readerDone
		healthy = acked.Load()
	}()

	write := func(b []byte) error {
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		return conn.WriteMessage(websocket.TextMessage, b)
	}
	heartbeat := func() error {
		b, seq := c.heartbeatFrame()
		s.noteSent(seq, time.Now())
		if err := write(b); err != nil {
			return fmt.Errorf("sending heartbeat %d: %w", seq, err)
		}
		return nil
	}

	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	if err := heartbeat(); err != nil {
		return false, err
	}
	for {
		select {
		case <-ctx.Done():
			// Clean stop: close 1000 and give the server a moment to answer.
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, "sidecar stopping"), time.Now().Add(closeWait))
			t := time.NewTimer(closeWait)
			select {
			case <-readerDone:
			case <-t.C:
			}
			t.Stop()
			return false, nil
		case <-ticker.C:
			if err := heartbeat(); err != nil {
				return false, err
			}
		case req := <-s.out:
			b, err := json.Marshal(req.frame)
			if err == nil {
				err = write(b)
			}
			req.done <- err
			if err != nil {
				return false, fmt.Errorf("sending %s: %w", req.frame.Type, err)
			}
		case err := <-readErr:
			return false, c.sessionEnded(err, readTimeout)
		}
	}
}

// openSession dials the session endpoint with the worker's token.
func (c *Client) openSession(ctx context.Context) (*websocket.Conn, error) {
	token, err := c.readToken()
	if err != nil {
		return nil, err
	}
	d, err := c.dialer()
	if err != nil {
		return nil, err
	}
	dctx, dcancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	conn, resp, err := d.DialContext(dctx, c.sessionURL, c.sessionHeaders(token))
	dcancel()
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			defer resp.Body.Close()
			return nil, statusError("open session", resp)
		}
		return nil, fmt.Errorf("open session: %w", err)
	}
	return conn, nil
}

// startReader reads the server's frames until the connection fails, and
// answers its pings. Every frame or ping extends the read deadline: a
// session silent for readTimeout is dead. readErr receives why the reading
// stopped; readerDone is closed when it has.
func (c *Client) startReader(ctx context.Context, s *session, acked *atomic.Bool, readTimeout, writeTimeout time.Duration) (readErr <-chan error, readerDone <-chan struct{}) {
	conn := s.conn
	conn.SetReadLimit(binding.MaxFrameSize)
	extend := func() { _ = conn.SetReadDeadline(time.Now().Add(readTimeout)) }
	extend()
	conn.SetPingHandler(func(data string) error {
		extend()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeTimeout))
		var ne net.Error
		if errors.Is(err, websocket.ErrCloseSent) || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})

	errc := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				errc <- err
				return
			}
			extend()
			c.handleFrame(ctx, s, data, acked)
		}
	}()
	return errc, done
}

// heartbeatFrame builds the next heartbeat. Progress or a checkpoint the protocol would
// reject (DecodeFrame is the server's check) is left out rather than
// breaking the session.
func (c *Client) heartbeatFrame() ([]byte, uint64) {
	hb := &binding.Heartbeat{Seq: c.nextSeq(), SentAt: time.Now().UTC()}
	if smp := c.sample.Load(); smp != nil {
		hb.Progress = smp.progress.Sanitized()
		hb.UploadedBytes = max(smp.uploaded, 0)
		hb.ArtifactError = smp.artifactError
		hb.Skipped, hb.SkippedCount = smp.skipped, smp.skippedCount
		hb.Checkpoint = smp.checkpoint
	}
	f := binding.Frame{Type: binding.FrameHeartbeat, Heartbeat: hb}
	b, err := json.Marshal(f)
	if err == nil {
		_, err = binding.DecodeFrame(b)
	}
	if err != nil {
		c.log.Warn("leaving invalid progress and checkpoint out of the heartbeat", "error", err)
		hb.Progress, hb.Checkpoint = nil, nil
		b, _ = json.Marshal(f) // cannot fail: no floats left
	}
	return b, hb.Seq
}

// sessionEnded classifies the error that ended the reader.
func (c *Client) sessionEnded(err error, readTimeout time.Duration) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case binding.CloseReplaced:
			return &takenOverError{text: ce.Text}
		case binding.CloseRevoked, binding.CloseFinished:
			return &PermanentError{Op: "session", CloseCode: ce.Code, CloseText: ce.Text}
		case binding.CloseProtocolError:
			c.log.Warn("the server closed the session for a protocol error", "reason", ce.Text)
		}
		return fmt.Errorf("server closed the session with %d (%s): %q", ce.Code, closeCodeMeaning(ce.Code), ce.Text)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("nothing read from the server for %s: connection presumed dead", readTimeout)
	}
	return fmt.Errorf("connection lost: %w", err)
}

// handleFrame runs on the reader goroutine and must not block on the writer
// for long.
func (c *Client) handleFrame(ctx context.Context, s *session, data []byte, acked *atomic.Bool) {
	f, err := binding.DecodeFrame(data)
	if err != nil {
		// Be lenient with the server: ignore the frame, but answer a
		// command we cannot read (e.g. one from a newer server) so that the
		// server does not wait for its ack.
		var raw struct {
			Type    string `json:"type"`
			Command *struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"command"`
		}
		if json.Unmarshal(data, &raw) == nil && raw.Type == binding.FrameCommand && raw.Command != nil && raw.Command.ID != "" {
			c.log.Warn("refusing an unsupported command", "id", raw.Command.ID, "command", truncate(raw.Command.Name, 64))
			go c.sendAck(ctx, s, binding.CommandAck{ID: raw.Command.ID, Error: "unsupported command " + strconv.Quote(truncate(raw.Command.Name, 64))})
			return
		}
		c.log.Warn("ignoring a malformed frame from the server", "error", err)
		return
	}
	switch f.Type {
	case binding.FrameAck:
		acked.Store(true)
		c.noteAck(s, f.Ack)
	case binding.FrameCommand:
		c.log.Info("command received", "id", f.Command.ID, "command", f.Command.Name, "reason", f.Command.Reason)
		select {
		case c.cmds <- commandRequest{cmd: *f.Command, s: s}:
		default:
			go c.sendAck(ctx, s, binding.CommandAck{ID: f.Command.ID, Error: "too many commands pending"})
		}
	default:
		c.log.Warn("ignoring a frame the server should not send", "type", f.Type)
	}
}

func (c *Client) noteAck(s *session, a *binding.Ack) {
	c.seqMu.Lock()
	sent := c.lastSent
	c.seqMu.Unlock()
	if a.Seq > sent {
		c.log.Warn("ignoring an ack for a heartbeat never sent", "seq", a.Seq, "lastSent", sent)
		return
	}
	for {
		old := c.lastAcked.Load()
		if a.Seq <= old || c.lastAcked.CompareAndSwap(old, a.Seq) {
			break
		}
	}
	if a.Phase != "" {
		p := a.Phase
		c.phase.Store(&p)
	}
	if at, ok := s.takeSent(a.Seq); ok {
		sample := time.Since(at)
		if old := time.Duration(c.rtt.Load()); old > 0 {
			sample = old*7/8 + sample/8 // as TCP's SRTT
		}
		c.rtt.Store(int64(sample))
	}
}
