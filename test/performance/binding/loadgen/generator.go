package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/sidecar/retry"
	bench "github.com/tether-dev/tether/test/performance/binding/loadproto"
)

// worker is one simulated sidecar.
type worker struct {
	id   bench.Identity
	conn *websocket.Conn // set once by the dialer before alive
	// seq is the last heartbeat sequence number; only the worker's sender
	// goroutine touches it after registration.
	seq uint64

	alive atomic.Bool
	// running is set by the first ack that says Running: the server has
	// written the session's Registered -> Running transition.
	running  atomic.Bool
	openedAt atomic.Int64 // UnixNano
	closedAt atomic.Int64 // UnixNano; 0 while open
	// pending are the heartbeats awaiting their acks, oldest first (the
	// server answers a session's heartbeats in order).
	mu      sync.Mutex
	pending []sentHeartbeat
}

type sentHeartbeat struct {
	seq  uint64
	sent int64 // UnixNano
}

type generator struct {
	cfg      bench.LoadgenConfig
	tls      *tls.Config
	workers  []*worker
	interval time.Duration
	senders  int

	lastOpen           atomic.Int64
	holdStart, holdEnd atomic.Int64 // UnixNano; 0 until set
	closing            atomic.Bool  // our own shutdown: ends are not counted

	stopSend  context.CancelFunc
	sendersWG sync.WaitGroup

	mu        sync.Mutex
	latencies []time.Duration // heartbeat -> ack, heartbeats sent in the measured phase
	sendLags  []time.Duration // schedule -> send, measured phase
	firstAcks []time.Duration // first heartbeat of a session -> ack (includes the Running write)
	closes    map[string]int

	sent, acks, late, skipped, stale, nonRunning, sendErrors, unexpected atomic.Int64
}

func newGenerator(cfg bench.LoadgenConfig, tc *tls.Config, ids []bench.Identity) *generator {
	g := &generator{cfg: cfg, tls: tc, interval: jobconfig.DefaultHeartbeatInterval, closes: map[string]int{}}
	g.workers = make([]*worker, len(ids))
	for i, id := range ids {
		g.workers[i] = &worker{id: id}
	}
	g.senders = min(8, len(ids))
	return g
}

// runningSessions counts the open sessions and those acked Running.
func (g *generator) runningSessions() (open, running int) {
	for _, w := range g.workers {
		if w.alive.Load() {
			open++
			if w.running.Load() {
				running++
			}
		}
	}
	return open, running
}

func (g *generator) inHold(t int64) bool {
	hs, he := g.holdStart.Load(), g.holdEnd.Load()
	return hs != 0 && t >= hs && (he == 0 || t < he)
}

// register POSTs every worker's registration, cfg.Registrars at a time
// over keep-alive connections, retrying what the server says to retry.
func (g *generator) register(ctx context.Context, res *bench.LoadgenResult) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: g.tls.Clone(), MaxIdleConns: g.cfg.Registrars, MaxIdleConnsPerHost: g.cfg.Registrars,
		MaxConnsPerHost: g.cfg.Registrars, DisableCompression: true, IdleConnTimeout: time.Minute,
	}}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	errs := map[string]int{}
	var intervals sync.Map
	var next, ok, failed atomic.Int64
	start := time.Now()
	stop := ticker(5*time.Second, func() {
		genLogf("registered %d/%d (%.0f/s), %d failed", ok.Load(), len(g.workers), float64(ok.Load())/time.Since(start).Seconds(), failed.Load())
	})
	var wg sync.WaitGroup
	for range g.cfg.Registrars {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(g.workers) {
					return
				}
				w := g.workers[i]
				resp, err := g.registerOne(ctx, hc, w.id)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					errs[errKey(err)]++
					mu.Unlock()
					continue
				}
				w.seq = resp.LastSeq
				intervals.Store(resp.HeartbeatInterval.Duration, true)
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	stop()
	intervals.Range(func(k, _ any) bool {
		g.interval = k.(time.Duration) // all the same: no TrainJob, the default
		return true
	})
	res.Registered, res.RegisterFailed = int(ok.Load()), int(failed.Load())
	res.RegisterSeconds = time.Since(start).Seconds()
	res.RegisterErrors = errs
	res.HeartbeatInterval = g.interval.String()
	genLogf("registered %d workers in %.1fs (%.0f/s), %d failed %v; heartbeat interval %s",
		res.Registered, res.RegisterSeconds, float64(res.Registered)/res.RegisterSeconds, res.RegisterFailed, errs, g.interval)
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

func errKey(err error) string {
	var he *httpError
	if errors.As(err, &he) {
		return "HTTP " + strconv.Itoa(he.status)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return "too many open files"
	}
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

func (g *generator) registerOne(ctx context.Context, hc *http.Client, id bench.Identity) (*binding.RegisterResponse, error) {
	body, err := json.Marshal(binding.RegisterRequest{JobID: id.JobID, WorkerID: id.WorkerID, SidecarVersion: "bench",
		Pod: binding.PodIdentity{Namespace: id.Namespace, Name: id.Pod, UID: id.UID, Node: "bench-node"}})
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := range 5 {
		if attempt > 0 {
			if err := retry.Sleep(ctx, time.Duration(200<<attempt)*time.Millisecond); err != nil {
				return nil, err
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.ServerURL+binding.PathRegister, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set(binding.HeaderAuthorization, "Bearer "+id.Token)
		req.Header.Set(names.HeaderPodToken, id.PodToken)
		req.Header.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			lastErr = &httpError{resp.StatusCode, string(raw)}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return nil, &httpError{resp.StatusCode, string(raw)}
		}
		var rr binding.RegisterResponse
		if err := json.Unmarshal(raw, &rr); err != nil {
			return nil, err
		}
		return &rr, nil
	}
	return nil, lastErr
}

// dial opens every registered worker's session, cfg.Dialers at a time.
func (g *generator) dial(ctx context.Context, res *bench.LoadgenResult) {
	u := "wss" + strings.TrimPrefix(g.cfg.ServerURL, "https") + binding.PathSession
	d := &websocket.Dialer{TLSClientConfig: g.tls.Clone(), HandshakeTimeout: 15 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}
	var mu sync.Mutex
	errs := map[string]int{}
	var next, ok, failed atomic.Int64
	start := time.Now()
	stop := ticker(5*time.Second, func() {
		genLogf("sessions open %d/%d (%.0f/s), %d failed", ok.Load(), len(g.workers), float64(ok.Load())/time.Since(start).Seconds(), failed.Load())
	})
	var wg sync.WaitGroup
	for range g.cfg.Dialers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(g.workers) {
					return
				}
				w := g.workers[i]
				if w.id.UID == "" {
					continue
				}
				if r := g.cfg.DialRate; r > 0 {
					_ = retry.Sleep(ctx, time.Until(start.Add(time.Duration(i)*time.Second/time.Duration(r))))
				}
				var err error
				for attempt := range 3 {
					if attempt > 0 {
						_ = retry.Sleep(ctx, time.Duration(attempt)*time.Second)
					}
					var conn *websocket.Conn
					var resp *http.Response
					conn, resp, err = d.DialContext(ctx, u, bench.SessionHeader(w.id))
					if err == nil {
						w.conn = conn
						if err = g.firstHeartbeat(w); err != nil {
							_ = conn.Close()
							break
						}
						now := time.Now().UnixNano()
						w.openedAt.Store(now)
						w.alive.Store(true)
						g.lastOpen.Store(now)
						go g.read(w)
						break
					}
					if resp != nil {
						raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
						_ = resp.Body.Close()
						err = &httpError{resp.StatusCode, string(raw)}
						if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusConflict {
							break
						}
					}
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					errs[errKey(err)]++
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	stop()
	res.Established, res.DialFailed = int(ok.Load()), int(failed.Load())
	res.EstablishSeconds = time.Since(start).Seconds()
	res.DialErrors = errs
	genLogf("%d sessions open in %.1fs (%.0f/s), %d failed %v", res.Established, res.EstablishSeconds,
		float64(res.Established)/res.EstablishSeconds, res.DialFailed, errs)
}

// firstHeartbeat sends a new session's first heartbeat and waits for its
// ack, as a sidecar's first heartbeat follows the handshake at once. The
// server writes the binding's status (Registered -> Running) before it
// acks, so the dialers open sessions no faster than the API server takes
// those writes: an open-loop ramp of thousands of sessions a second queues
// thousands of writes (see the package documentation).
func (g *generator) firstHeartbeat(w *worker) error {
	conn := w.conn
	w.seq++
	start := time.Now()
	_ = conn.SetWriteDeadline(start.Add(5 * time.Second))
	if err := conn.WriteMessage(websocket.TextMessage, appendHeartbeat(nil, w.seq, start)); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(start.Add(30 * time.Second))
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return err
		}
		f, err := binding.DecodeFrame(data)
		if err != nil {
			return err
		}
		if f.Type == binding.FrameAck && f.Ack.Seq == w.seq {
			g.mu.Lock()
			g.firstAcks = append(g.firstAcks, time.Since(start))
			g.mu.Unlock()
			return nil
		}
	}
}

func ticker(every time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done) }
}

var ackPrefix = []byte(`{"type":"ack","ack":{"seq":`)

// read is the session's one reader goroutine: acks are matched to the
// pending heartbeat; pings are answered by gorilla's default handler.
func (g *generator) read(w *worker) {
	conn := w.conn
	conn.SetReadLimit(binding.MaxFrameSize)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(time.Duration(bench.MissedHeartbeats)*g.interval + 10*time.Second))
		_, data, err := conn.ReadMessage()
		if err != nil {
			g.ended(w, err)
			return
		}
		now := time.Now().UnixNano()
		var seq uint64
		var running bool
		if rest, ok := bytes.CutPrefix(data, ackPrefix); ok {
			end := bytes.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
			if end <= 0 {
				g.unexpected.Add(1)
				continue
			}
			seq, _ = strconv.ParseUint(string(rest[:end]), 10, 64)
			running = bytes.Contains(rest, []byte(`"phase":"Running"`))
		} else {
			f, err := binding.DecodeFrame(data)
			if err != nil || f.Type != binding.FrameAck {
				g.unexpected.Add(1)
				continue
			}
			seq, running = f.Ack.Seq, f.Ack.Phase == string(tetherv1.PhaseRunning)
		}
		if running {
			w.running.Store(true)
		}
		var hb sentHeartbeat
		late, skipped := false, 0
		w.mu.Lock()
		for len(w.pending) > 0 && w.pending[0].seq < seq {
			w.pending = w.pending[1:]
			skipped++
		}
		if len(w.pending) > 0 && w.pending[0].seq == seq {
			hb, late = w.pending[0], len(w.pending) > 1
			w.pending = w.pending[1:]
		}
		w.mu.Unlock()
		if skipped > 0 {
			g.skipped.Add(int64(skipped))
		}
		if hb.seq == 0 {
			g.stale.Add(1)
			continue
		}
		if !g.inHold(hb.sent) {
			continue
		}
		g.acks.Add(1)
		if late {
			g.late.Add(1)
		}
		if !running {
			g.nonRunning.Add(1)
		}
		g.mu.Lock()
		g.latencies = append(g.latencies, time.Duration(now-hb.sent))
		g.mu.Unlock()
	}
}

func (g *generator) ended(w *worker, err error) {
	w.alive.Store(false)
	w.closedAt.Store(time.Now().UnixNano())
	if g.closing.Load() {
		return
	}
	var ce *websocket.CloseError
	var ne net.Error
	key := "error"
	switch {
	case errors.As(err, &ce):
		key = "close " + strconv.Itoa(ce.Code)
	case errors.As(err, &ne) && ne.Timeout():
		key = "read timeout"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		key = "eof"
	}
	g.mu.Lock()
	g.closes[key]++
	g.mu.Unlock()
}

func (g *generator) openSessions() int {
	n := 0
	for _, w := range g.workers {
		if w.alive.Load() {
			n++
		}
	}
	return n
}

// held counts the sessions open through [start, end), and those that were
// open at start and ended within it.
func (g *generator) held(start, end time.Time) (held, closed int) {
	s, e := start.UnixNano(), end.UnixNano()
	for _, w := range g.workers {
		o := w.openedAt.Load()
		if o == 0 || o > s {
			continue
		}
		switch c := w.closedAt.Load(); {
		case c == 0 || c >= e:
			held++
		case c >= s:
			closed++
		}
	}
	return held, closed
}

// startSenders starts the shared heartbeat scheduler: g.senders goroutines,
// sender k owning workers k, k+senders, ... Worker i heartbeats at
// t0 + i*interval/n + r*interval (r = 0, 1, ...), so the load is spread
// evenly over the interval; a worker whose session is not open yet skips
// its slot.
func (g *generator) startSenders(ctx context.Context) {
	ctx, g.stopSend = context.WithCancel(ctx)
	t0 := time.Now()
	n := len(g.workers)
	for k := range g.senders {
		g.sendersWG.Go(func() {
			buf := make([]byte, 0, 512)
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for r := 0; ; r++ {
				for i := k; i < n; i += g.senders {
					due := t0.Add(time.Duration(r)*g.interval + time.Duration(int64(i)*int64(g.interval)/int64(n)))
					if wait := time.Until(due); wait > 0 {
						timer.Reset(wait)
						select {
						case <-ctx.Done():
							return
						case <-timer.C:
						}
					} else if ctx.Err() != nil {
						return
					}
					w := g.workers[i]
					if !w.alive.Load() {
						continue
					}
					buf = g.heartbeat(w, buf, due)
				}
			}
		})
	}
}

func (g *generator) stopSenders() {
	if g.stopSend != nil {
		g.stopSend()
		g.sendersWG.Wait()
	}
}

// heartbeat sends w's next heartbeat; progress makes it look like a real
// sidecar's with a progress file.
func (g *generator) heartbeat(w *worker, buf []byte, due time.Time) []byte {
	w.seq++
	now := time.Now()
	ts := now.UnixNano()
	buf = appendHeartbeat(buf[:0], w.seq, now)
	w.mu.Lock()
	w.pending = append(w.pending, sentHeartbeat{seq: w.seq, sent: ts})
	w.mu.Unlock()
	if g.inHold(ts) {
		g.sent.Add(1)
		g.mu.Lock()
		g.sendLags = append(g.sendLags, now.Sub(due))
		g.mu.Unlock()
	}
	_ = w.conn.SetWriteDeadline(now.Add(5 * time.Second))
	if err := w.conn.WriteMessage(websocket.TextMessage, buf); err != nil {
		g.sendErrors.Add(1)
		_ = w.conn.Close() // the reader records the end
	}
	return buf
}

func appendHeartbeat(b []byte, seq uint64, now time.Time) []byte {
	b = append(b, `{"type":"heartbeat","heartbeat":{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"sentAt":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","progress":{"step":`...)
	b = strconv.AppendUint(b, 100*seq, 10)
	b = append(b, `,"epoch":1.5,"loss":0.2345,"fraction":0.42,"updatedAt":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339)
	b = append(b, `"},"uploadedBytes":`...)
	b = strconv.AppendUint(b, 1<<20*seq, 10)
	return append(b, `}}`...)
}

// finish fills in the measured phase's results.
func (g *generator) finish(res *bench.LoadgenResult) {
	now := time.Now().UnixNano()
	var unanswered []time.Duration
	for _, w := range g.workers {
		w.mu.Lock()
		for _, hb := range w.pending {
			if g.inHold(hb.sent) {
				unanswered = append(unanswered, time.Duration(now-hb.sent))
			}
		}
		w.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	res.HeartbeatsSent, res.Acks, res.Unanswered, res.Late = g.sent.Load(), g.acks.Load(), int64(len(unanswered)), g.late.Load()
	res.Skipped, res.StaleAcks = g.skipped.Load(), g.stale.Load()
	g.latencies = append(g.latencies, unanswered...)
	res.NonRunningAcks, res.SendErrors, res.UnexpectedFrames = g.nonRunning.Load(), g.sendErrors.Load(), g.unexpected.Load()
	res.Latency, res.SendLag, res.FirstAck = summarize(g.latencies), summarize(g.sendLags), summarize(g.firstAcks)
	res.CloseCodes = maps.Clone(g.closes)
}

// closeAll ends every session with a normal closure.
func (g *generator) closeAll() {
	if g.closing.Swap(true) {
		return
	}
	g.stopSenders()
	deadline := time.Now().Add(time.Second)
	for _, w := range g.workers {
		if w.alive.Load() {
			_ = w.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "benchmark done"), deadline)
		}
	}
	time.Sleep(500 * time.Millisecond)
	for _, w := range g.workers {
		if w.conn != nil {
			_ = w.conn.Close()
		}
	}
}
