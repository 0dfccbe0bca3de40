package session

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/test/framework/certs"
)

// The stub server below exists ONLY to drive the Client's state machine over
// real loopback TLS and WebSocket connections. It is not the binding server
// (pkg/bindingserver) and proves nothing about it; the real server's
// integration tests, client and server together, come separately. The stub is
// strict where the contract is: it checks the headers on every request and
// decodes every client frame with DecodeFrame, failing the test on anything
// the real server would reject.

const (
	testToken  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testToken2 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	testWait   = 3 * time.Second // bound of every wait in these tests
	// testPodToken stands for the kubelet's projected pod token (a JWT).
	testPodToken = "eyJhbGciOiJSUzI1NiJ9.eyJuIjoxfQ.c2ln"
)

type stubServer struct {
	t      *testing.T
	srv    *httptest.Server
	caFile string

	mu            sync.Mutex
	token         string        // the token the server accepts
	registerCodes []int         // answers before 200, consumed in order
	sessionCode   int           // if not 0, refuse session upgrades with it
	sessionErr    string        // the ErrorResponse code of that refusal ("": Forbidden)
	sessionCodes  []int         // refusals of the next upgrades, consumed in order (with sessionErr)
	lastSeq       uint64        // RegisterResponse.LastSeq
	interval      time.Duration // RegisterResponse.HeartbeatInterval
	registers     int
	sessions      int
	registered    []binding.RegisterRequest
	podTokens     []string            // names.HeaderPodToken of every request, in arrival order
	heartbeats    []binding.Heartbeat // of every session, in arrival order
	// session serves one upgraded connection; nil means ackAll.
	session func(ss *stubSession)

	events chan binding.Frame // commandAcks and finishing frames
	closes chan int           // close codes the client sent
}

type stubSession struct {
	s    *stubServer
	n    int // 1-based
	conn *websocket.Conn
}

func newStubServer(t *testing.T) *stubServer {
	t.Helper()
	s := &stubServer{
		t: t, token: testToken, interval: 50 * time.Millisecond,
		events: make(chan binding.Frame, 64), closes: make(chan int, 16),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+binding.PathRegister, s.handleRegister)
	mux.HandleFunc("GET "+binding.PathSession, s.handleSession)
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake failures are expected in some tests
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	s.caFile = filepath.Join(t.TempDir(), "ca.crt")
	writeFile(t, s.caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})))
	return s
}

func (s *stubServer) writeError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(binding.ErrorResponse{Code: code, Message: "stub says " + code})
}

// authorize checks what every request must carry.
func (s *stubServer) authorize(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.RawQuery != "" {
		s.t.Errorf("%s carries a query %q; the token must never be in the URL", r.URL.Path, r.URL.RawQuery)
	}
	if v := r.Header.Get(names.HeaderProtocolVersion); v != binding.ProtocolVersion {
		s.t.Errorf("%s: %s = %q, want %q", r.URL.Path, names.HeaderProtocolVersion, v, binding.ProtocolVersion)
		s.writeError(w, http.StatusBadRequest, binding.ErrUnsupportedVersion)
		return false
	}
	tok, err := binding.TokenFromHeader(r.Header)
	s.mu.Lock()
	want := s.token
	s.podTokens = append(s.podTokens, r.Header.Get(names.HeaderPodToken))
	s.mu.Unlock()
	if err != nil || string(tok) != want {
		s.writeError(w, http.StatusUnauthorized, binding.ErrUnauthorized)
		return false
	}
	return true
}

func (s *stubServer) handleRegister(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.registers++
	var code int
	if len(s.registerCodes) > 0 {
		code, s.registerCodes = s.registerCodes[0], s.registerCodes[1:]
	}
	s.mu.Unlock()
	if !s.authorize(w, r) {
		return
	}
	var req binding.RegisterRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, binding.MaxRegisterBody)).Decode(&req); err != nil {
		s.t.Errorf("register body: %v", err)
		s.writeError(w, http.StatusBadRequest, binding.ErrBadRequest)
		return
	}
	if code != 0 {
		codes := map[int]string{400: binding.ErrUnsupportedVersion, 401: binding.ErrUnauthorized, 403: binding.ErrForbidden, 410: binding.ErrBindingFinished}
		ec := codes[code]
		if ec == "" {
			ec = binding.ErrUnavailable
		}
		s.writeError(w, code, ec)
		return
	}
	s.mu.Lock()
	s.registered = append(s.registered, req)
	resp := binding.RegisterResponse{JobID: req.JobID, WorkerID: req.WorkerID, Phase: "Running",
		HeartbeatInterval: binding.Duration{Duration: s.interval}, LastSeq: s.lastSeq}
	s.mu.Unlock()
	_ = json.NewEncoder(w).Encode(resp)
}

func (s *stubServer) handleSession(w http.ResponseWriter, r *http.Request) {
	if !s.authorize(w, r) {
		return
	}
	s.mu.Lock()
	code := s.sessionCode
	if len(s.sessionCodes) > 0 {
		code, s.sessionCodes = s.sessionCodes[0], s.sessionCodes[1:]
	}
	if code != 0 {
		ec := s.sessionErr
		if ec == "" {
			ec = binding.ErrForbidden
		}
		s.mu.Unlock()
		s.writeError(w, code, ec)
		return
	}
	s.sessions++
	ss := &stubSession{s: s, n: s.sessions}
	serve := s.session
	s.mu.Unlock()
	conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
	if err != nil {
		s.t.Errorf("upgrade: %v", err)
		return
	}
	defer conn.Close()
	conn.SetReadLimit(binding.MaxFrameSize)
	ss.conn = conn
	conn.SetCloseHandler(func(code int, text string) error {
		s.closes <- code
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
		return nil
	})
	if serve == nil {
		serve = (*stubSession).ackAll
	}
	serve(ss)
}

// next reads the next client frame, recording heartbeats and forwarding
// commandAcks and finishing frames to events. ok is false once the
// connection is gone.
func (ss *stubSession) next() (f binding.Frame, ok bool) {
	_, data, err := ss.conn.ReadMessage()
	if err != nil {
		return binding.Frame{}, false
	}
	f, err = binding.DecodeFrame(data)
	if err != nil {
		ss.s.t.Errorf("client sent a frame the server would reject: %v: %s", err, data)
		return binding.Frame{}, false
	}
	switch f.Type {
	case binding.FrameHeartbeat:
		ss.s.mu.Lock()
		ss.s.heartbeats = append(ss.s.heartbeats, *f.Heartbeat)
		ss.s.mu.Unlock()
	case binding.FrameCommandAck, binding.FrameFinishing:
		ss.s.events <- f
	default:
		ss.s.t.Errorf("client sent a %q frame", f.Type)
	}
	return f, true
}

func (ss *stubSession) write(f binding.Frame) {
	b, err := json.Marshal(f)
	if err != nil {
		ss.s.t.Fatal(err)
	}
	_ = ss.conn.WriteMessage(websocket.TextMessage, b)
}

func (ss *stubSession) ack(seq uint64) {
	ss.write(binding.Frame{Type: binding.FrameAck, Ack: &binding.Ack{Seq: seq, ServerTime: time.Now(), Phase: "Running"}})
}

// ackAll acknowledges every heartbeat until the connection ends.
func (ss *stubSession) ackAll() {
	for {
		f, ok := ss.next()
		if !ok {
			return
		}
		if f.Type == binding.FrameHeartbeat {
			ss.ack(f.Heartbeat.Seq)
		}
	}
}

// ackN acknowledges n heartbeats and returns.
func (ss *stubSession) ackN(n int) {
	for n > 0 {
		f, ok := ss.next()
		if !ok {
			return
		}
		if f.Type == binding.FrameHeartbeat {
			ss.ack(f.Heartbeat.Seq)
			n--
		}
	}
}

// closeWith sends a close frame and waits briefly for the client's answer.
func (ss *stubSession) closeWith(code int, text string) {
	_ = ss.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
	_ = ss.conn.SetReadDeadline(time.Now().Add(time.Second))
	for {
		if _, _, err := ss.conn.ReadMessage(); err != nil {
			return
		}
	}
}

func (s *stubServer) seqs() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint64, len(s.heartbeats))
	for i, h := range s.heartbeats {
		out[i] = h.Seq
	}
	return out
}

func (s *stubServer) counts() (registers, sessions int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.registers, s.sessions
}

// ---- client side helpers ----

// syncBuffer collects the client's logs so that tests can check the token
// never appears in them.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write and rename, as the kubelet updates a Secret volume atomically.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newTestClient(t *testing.T, s *stubServer, mutate func(*Config)) *Client {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	writeFile(t, tokenFile, testToken+"\n")
	podTokenFile := filepath.Join(dir, "pod-token")
	writeFile(t, podTokenFile, testPodToken)
	logs := &syncBuffer{}
	cfg := Config{
		ServerURL: s.srv.URL, TokenFile: tokenFile, PodTokenFile: podTokenFile, CAFile: s.caFile,
		JobID: "job-1", WorkerID: "worker-0",
		Pod:               binding.PodIdentity{Namespace: "ns", Name: "pod-0", UID: "uid-0", Node: "node-a"},
		SidecarVersion:    "test",
		HeartbeatInterval: 50 * time.Millisecond,
		RequestTimeout:    2 * time.Second,
		BackoffInitial:    5 * time.Millisecond,
		BackoffMax:        50 * time.Millisecond,
		Logger:            slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		out := logs.String()
		for _, tok := range []string{testToken, testToken2} {
			if strings.Contains(out, tok) {
				t.Errorf("the token appears in the client's logs")
			}
		}
		if t.Failed() {
			t.Logf("client logs:\n%s", out)
		}
	})
	return c
}

// startRun runs c.Run in the background. wait returns Run's result once it
// returned by itself; stop cancels Run and returns its result. stop is also
// called at cleanup.
func startRun(t *testing.T, c *Client) (wait, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	var result error
	go func() {
		defer close(finished)
		result = c.Run(ctx)
	}()
	wait = func() error {
		t.Helper()
		select {
		case <-finished:
			return result
		case <-time.After(testWait):
			t.Fatal("Run did not return")
			return nil
		}
	}
	stop = func() error {
		t.Helper()
		cancel()
		select {
		case <-finished:
			return result
		case <-time.After(testWait):
			t.Error("Run did not return after its context was cancelled")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return wait, stop
}

// eventually polls cond until it holds or testWait passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitEvent(t *testing.T, s *stubServer, typ string) binding.Frame {
	t.Helper()
	timeout := time.After(testWait)
	for {
		select {
		case f := <-s.events:
			if f.Type == typ {
				return f
			}
		case <-timeout:
			t.Fatalf("timed out waiting for a %s frame", typ)
		}
	}
}

// ---- Register ----

func TestRegisterOK(t *testing.T) {
	s := newStubServer(t)
	s.lastSeq = 41
	c := newTestClient(t, s, nil)
	rr, err := c.Register(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rr.LastSeq != 41 || rr.Phase != "Running" || rr.HeartbeatInterval.Duration != 50*time.Millisecond {
		t.Errorf("response = %+v", rr)
	}
	want := binding.RegisterRequest{JobID: "job-1", WorkerID: "worker-0", SidecarVersion: "test",
		Pod: binding.PodIdentity{Namespace: "ns", Name: "pod-0", UID: "uid-0", Node: "node-a"}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.registered) != 1 || s.registered[0] != want {
		t.Errorf("server got %+v, want %+v", s.registered, want)
	}
}

// TestPodTokenIsReadForEveryRequest: the pod token travels in its header,
// read from its file for every request, so the kubelet's rotation is picked
// up; a file that holds no token is a permanent error naming the file.
func TestPodTokenIsReadForEveryRequest(t *testing.T) {
	s := newStubServer(t)
	c := newTestClient(t, s, nil)
	if _, err := c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	const rotated = "eyJhbGciOiJSUzI1NiJ9.eyJuIjoyfQ.c2ln"
	writeFile(t, c.cfg.PodTokenFile, rotated+"\n")
	if _, err := c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	got := slices.Clone(s.podTokens)
	s.mu.Unlock()
	if !slices.Equal(got, []string{testPodToken, rotated}) {
		t.Errorf("pod tokens sent: %q, want %q then %q", got, testPodToken, rotated)
	}
	writeFile(t, c.cfg.PodTokenFile, "\n")
	_, err := c.Register(context.Background())
	if !IsPermanent(err) || !strings.Contains(err.Error(), "pod token") {
		t.Errorf("empty pod token file: %v, want a permanent error naming the pod token", err)
	}
}

func TestRegisterPermanentErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusBadRequest, binding.ErrUnsupportedVersion},
		{http.StatusUnauthorized, binding.ErrUnauthorized},
		{http.StatusForbidden, binding.ErrForbidden},
		{http.StatusGone, binding.ErrBindingFinished},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			s := newStubServer(t)
			s.registerCodes = []int{tc.status, tc.status, tc.status}
			c := newTestClient(t, s, nil)
			_, err := c.Register(context.Background())
			var pe *PermanentError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *PermanentError", err)
			}
			if pe.StatusCode != tc.status || pe.Response == nil || pe.Response.Code != tc.code {
				t.Errorf("err = %+v (%v), want status %d code %s", pe, err, tc.status, tc.code)
			}
			var er *binding.ErrorResponse
			if !errors.As(err, &er) || er.Code != tc.code {
				t.Errorf("errors.As(ErrorResponse) = %v", er)
			}
			if n, _ := s.counts(); n != 1 {
				t.Errorf("%d registration requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestRegisterRetriesUnavailable(t *testing.T) {
	s := newStubServer(t)
	s.registerCodes = []int{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusServiceUnavailable}
	c := newTestClient(t, s, nil)
	if _, err := c.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.counts(); n != 4 {
		t.Errorf("%d registration requests, want 4", n)
	}
}

func TestRegisterStopsWithContext(t *testing.T) {
	s := newStubServer(t)
	s.registerCodes = make([]int, 1000)
	for i := range s.registerCodes {
		s.registerCodes[i] = http.StatusServiceUnavailable
	}
	c := newTestClient(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Register(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || IsPermanent(err) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if !strings.Contains(err.Error(), "503") {
		t.Errorf("err = %v, want it to name the last failure", err)
	}
}

func TestRegisterMalformedTokenIsPermanent(t *testing.T) {
	s := newStubServer(t)
	c := newTestClient(t, s, nil)
	writeFile(t, c.cfg.TokenFile, "not a token")
	_, err := c.Register(context.Background())
	var pe *PermanentError
	if !errors.As(err, &pe) || pe.Op != "read token" {
		t.Fatalf("err = %v, want a permanent read token error", err)
	}
	if n, _ := s.counts(); n != 0 {
		t.Errorf("%d requests sent with a malformed token", n)
	}
}

func TestRegisterRereadsCA(t *testing.T) {
	s := newStubServer(t)
	goodCA, err := os.ReadFile(s.caFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.caFile, otherCA(t))
	c := newTestClient(t, s, nil)
	fixed := make(chan struct{})
	go func() {
		defer close(fixed)
		time.Sleep(100 * time.Millisecond)
		tmp := s.caFile + ".new"
		if os.WriteFile(tmp, goodCA, 0o600) == nil {
			_ = os.Rename(tmp, s.caFile)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	_, err = c.Register(ctx)
	<-fixed
	if err != nil {
		t.Fatalf("registration did not succeed once the CA file was fixed: %v", err)
	}
	if n, _ := s.counts(); n != 1 {
		t.Errorf("%d registrations reached the handler, want 1 (the others fail the TLS handshake)", n)
	}
}

// otherCA is a PEM certificate that did not sign the stub server's.
func otherCA(t *testing.T) string {
	t.Helper()
	return string(certs.NewCA(t, certs.CommonName("other CA")).CertPEM)
}

// ---- Run ----

func TestRunHeartbeatsAndCommands(t *testing.T) {
	s := newStubServer(t)
	s.lastSeq = 41
	s.session = func(ss *stubSession) {
		for {
			f, ok := ss.next()
			if !ok {
				return
			}
			if f.Type != binding.FrameHeartbeat {
				continue
			}
			ss.ack(f.Heartbeat.Seq)
			if f.Heartbeat.Seq == 43 {
				ss.write(binding.Frame{Type: binding.FrameCommand, Command: &binding.Command{ID: "c1", Name: binding.CommandFlush}})
				ss.write(binding.Frame{Type: binding.FrameCommand, Command: &binding.Command{ID: "c2", Name: binding.CommandDrain, Reason: "preempted"}})
				// A command a newer server might send: the client must
				// still answer it.
				ss.write(binding.Frame{Type: binding.FrameCommand, Command: &binding.Command{ID: "c3", Name: "snapshot"}})
			}
		}
	}
	step, fraction := int64(7), 0.5
	var gotCmds []binding.Command
	var cmdMu sync.Mutex
	c := newTestClient(t, s, func(cfg *Config) {
		cfg.Progress = func() *binding.Progress { return &binding.Progress{Step: &step, Fraction: &fraction} }
		cfg.UploadedBytes = func() int64 { return 1234 }
		cfg.OnCommand = func(ctx context.Context, cmd binding.Command) error {
			cmdMu.Lock()
			gotCmds = append(gotCmds, cmd)
			cmdMu.Unlock()
			if cmd.Name == binding.CommandDrain {
				return errors.New("drain failed")
			}
			return nil
		}
	})
	_, stop := startRun(t, c)

	acks := map[string]binding.CommandAck{}
	for len(acks) < 3 {
		f := waitEvent(t, s, binding.FrameCommandAck)
		acks[f.CommandAck.ID] = *f.CommandAck
	}
	if a := acks["c1"]; !a.OK || a.Error != "" {
		t.Errorf("ack c1 = %+v, want OK", a)
	}
	if a := acks["c2"]; a.OK || a.Error != "drain failed" {
		t.Errorf("ack c2 = %+v, want the handler's error", a)
	}
	if a := acks["c3"]; a.OK || !strings.Contains(a.Error, "unsupported command") {
		t.Errorf("ack c3 = %+v, want an unsupported command error", a)
	}
	cmdMu.Lock()
	if len(gotCmds) != 2 || gotCmds[0].ID != "c1" || gotCmds[1].Reason != "preempted" {
		t.Errorf("OnCommand got %+v", gotCmds)
	}
	cmdMu.Unlock()

	eventually(t, "heartbeats with progress", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		h := s.heartbeats[len(s.heartbeats)-1]
		return h.Progress != nil && h.Progress.Step != nil && *h.Progress.Step == 7 && h.UploadedBytes == 1234
	})
	eventually(t, "acks", func() bool { return c.LastAckedSeq() >= 45 })
	if !c.Connected() || c.RTT() <= 0 || c.Phase() != "Running" || c.Reconnects() != 0 {
		t.Errorf("Connected %v RTT %v Phase %q Reconnects %d", c.Connected(), c.RTT(), c.Phase(), c.Reconnects())
	}
	if err := stop(); err != nil {
		t.Errorf("Run = %v after cancel, want nil", err)
	}
	select {
	case code := <-s.closes:
		if code != websocket.CloseNormalClosure {
			t.Errorf("client closed with %d, want 1000", code)
		}
	case <-time.After(testWait):
		t.Error("the client did not send a close frame when stopped")
	}
	if c.Connected() {
		t.Error("Connected after Run returned")
	}
	seqs := s.seqs()
	for i, seq := range seqs {
		if seq != 42+uint64(i) {
			t.Fatalf("heartbeat seqs %v, want consecutive from LastSeq+1 = 42", seqs)
		}
	}
}

func TestRunStopsOnFinalClose(t *testing.T) {
	for _, code := range []int{binding.CloseRevoked, binding.CloseFinished} {
		t.Run(closeCodeMeaning(code), func(t *testing.T) {
			s := newStubServer(t)
			s.session = func(ss *stubSession) {
				ss.ackN(1)
				ss.closeWith(code, "stub")
			}
			c := newTestClient(t, s, nil)
			wait, _ := startRun(t, c)
			err := wait()
			var pe *PermanentError
			if !errors.As(err, &pe) || pe.CloseCode != code || pe.CloseText != "stub" {
				t.Fatalf("Run = %v, want a permanent error with close code %d", err, code)
			}
			if c.Reconnects() != 0 {
				t.Errorf("Reconnects = %d, want 0", c.Reconnects())
			}
		})
	}
}

// TestRunReclaimsATakenOverSession: anyone with the job's token can open a
// session as this pod and the server closes this one with 4001. The sidecar
// opens its session again, first refused while the other one is live (409
// SessionActive), without registering again, and goes on.
func TestRunReclaimsATakenOverSession(t *testing.T) {
	s := newStubServer(t)
	s.session = func(ss *stubSession) {
		if ss.n > 1 {
			ss.ackAll()
			return
		}
		ss.ackN(2)
		ss.s.mu.Lock()
		ss.s.sessionCodes, ss.s.sessionErr = []int{http.StatusConflict, http.StatusConflict}, binding.ErrSessionActive
		ss.s.mu.Unlock()
		ss.closeWith(binding.CloseReplaced, "replaced by a newer session of the same worker")
	}
	c := newTestClient(t, s, nil)
	_, stop := startRun(t, c)
	eventually(t, "the session back, with heartbeats", func() bool {
		_, sessions := s.counts()
		return sessions == 2 && c.LastAckedSeq() >= 4
	})
	if err := stop(); err != nil {
		t.Errorf("Run = %v after cancel, want nil", err)
	}
	if registers, _ := s.counts(); registers != 1 {
		t.Errorf("%d registrations, want 1: taking the session back registers no pod", registers)
	}
	if c.Takeovers() != 1 {
		t.Errorf("Takeovers = %d, want 1", c.Takeovers())
	}
}

// TestRunStopsWhenNoLongerTheNodesPod: after a 4001, the server refusing the
// session as not the node's registered pod (a replacement pod registered)
// ends the binding for this pod, without a registration that would make it
// the node's pod again.
func TestRunStopsWhenNoLongerTheNodesPod(t *testing.T) {
	s := newStubServer(t)
	s.session = func(ss *stubSession) {
		ss.ackN(1)
		ss.s.mu.Lock()
		ss.s.sessionCode, ss.s.sessionErr = http.StatusConflict, binding.ErrBadRequest
		ss.s.mu.Unlock()
		ss.closeWith(binding.CloseReplaced, "the node's pod was replaced by train-node-0-0-xyz")
	}
	c := newTestClient(t, s, nil)
	wait, _ := startRun(t, c)
	err := wait()
	var pe *PermanentError
	if !errors.As(err, &pe) || pe.CloseCode != binding.CloseReplaced {
		t.Fatalf("Run = %v, want a permanent error with close code %d", err, binding.CloseReplaced)
	}
	if registers, _ := s.counts(); registers != 1 {
		t.Errorf("%d registrations, want 1", registers)
	}
}

func TestRunReconnectsAfterDrop(t *testing.T) {
	s := newStubServer(t)
	s.lastSeq = 10
	var c *Client
	s.session = func(ss *stubSession) {
		if ss.n > 1 {
			ss.ackAll()
			return
		}
		ss.ackN(3)
		// Rotate the token, then drop the connection without a close frame:
		// the client must re-read the token to get back in.
		writeFile(t, c.cfg.TokenFile, testToken2)
		ss.s.mu.Lock()
		ss.s.token = testToken2
		ss.s.mu.Unlock()
		ss.conn.NetConn().Close()
	}
	c = newTestClient(t, s, nil)
	_, stop := startRun(t, c)
	eventually(t, "a second session with heartbeats", func() bool {
		_, sessions := s.counts()
		return sessions == 2 && len(s.seqs()) >= 6
	})
	if err := stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
	seqs := s.seqs()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("heartbeat seqs %v go back", seqs)
		}
	}
	if seqs[0] != 11 {
		t.Errorf("first seq %d, want 11", seqs[0])
	}
	if registers, _ := s.counts(); registers != 2 {
		t.Errorf("%d registrations, want 2 (one per session)", registers)
	}
	if c.Reconnects() != 1 {
		t.Errorf("Reconnects = %d, want 1", c.Reconnects())
	}
}

func TestRunReconnectsAfterProtocolError(t *testing.T) {
	s := newStubServer(t)
	s.session = func(ss *stubSession) {
		if ss.n == 1 {
			ss.ackN(1)
			ss.closeWith(binding.CloseProtocolError, "stub dislikes you")
			return
		}
		ss.ackAll()
	}
	c := newTestClient(t, s, nil)
	_, stop := startRun(t, c)
	eventually(t, "a reconnect", func() bool { return c.Reconnects() == 1 && c.Connected() })
	if err := stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestRunNoticesDeadConnection(t *testing.T) {
	s := newStubServer(t)
	s.session = func(ss *stubSession) {
		if ss.n == 1 {
			// Read but never answer: the client's read deadline (3 ×
			// 50ms) must notice.
			for {
				if _, ok := ss.next(); !ok {
					return
				}
			}
		}
		ss.ackAll()
	}
	c := newTestClient(t, s, nil)
	_, stop := startRun(t, c)
	eventually(t, "a reconnect", func() bool { return c.Reconnects() == 1 && c.LastAckedSeq() > 0 })
	if err := stop(); err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestRunSessionRefused(t *testing.T) {
	s := newStubServer(t)
	s.sessionCode = http.StatusForbidden
	c := newTestClient(t, s, nil)
	wait, _ := startRun(t, c)
	err := wait()
	var pe *PermanentError
	if !errors.As(err, &pe) || pe.Op != "open session" || pe.StatusCode != http.StatusForbidden {
		t.Fatalf("Run = %v, want a permanent open session error", err)
	}
}

func TestRunRejectsConcurrentRun(t *testing.T) {
	s := newStubServer(t)
	c := newTestClient(t, s, nil)
	_, stop := startRun(t, c)
	eventually(t, "connected", c.Connected)
	if err := c.Run(context.Background()); err == nil {
		t.Error("a second concurrent Run was accepted")
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
}

// ---- Finish ----

func TestFinishOnLiveSession(t *testing.T) {
	s := newStubServer(t)
	c := newTestClient(t, s, nil)
	_, stop := startRun(t, c)
	eventually(t, "connected", c.Connected)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if err := c.Finish(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if f := waitEvent(t, s, binding.FrameFinishing); f.Finishing.Reason != "SIGTERM" {
		t.Errorf("finishing = %+v", f.Finishing)
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
	if _, sessions := s.counts(); sessions != 1 {
		t.Errorf("%d sessions, want 1", sessions)
	}
}

func TestFinishWithoutSession(t *testing.T) {
	s := newStubServer(t)
	c := newTestClient(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if err := c.Finish(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if f := waitEvent(t, s, binding.FrameFinishing); f.Finishing.Reason != "SIGTERM" {
		t.Errorf("finishing = %+v", f.Finishing)
	}
	if registers, sessions := s.counts(); registers != 1 || sessions != 1 {
		t.Errorf("%d registrations, %d sessions; want 1, 1", registers, sessions)
	}
	select {
	case code := <-s.closes:
		if code != websocket.CloseNormalClosure {
			t.Errorf("closed with %d", code)
		}
	case <-time.After(testWait):
		t.Error("no close frame")
	}
}

// ---- pieces ----

func TestNewClientValidates(t *testing.T) {
	ok := Config{ServerURL: "https://tether.example:8443", TokenFile: "/t", JobID: "j", WorkerID: "w"}
	if _, err := NewClient(ok); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Config){
		"no URL":     func(c *Config) { c.ServerURL = "" },
		"http":       func(c *Config) { c.ServerURL = "http://tether.example" },
		"query":      func(c *Config) { c.ServerURL = "https://tether.example/?token=x" },
		"user":       func(c *Config) { c.ServerURL = "https://u:p@tether.example" },
		"no token":   func(c *Config) { c.TokenFile = "" },
		"no job":     func(c *Config) { c.JobID = "" },
		"no worker":  func(c *Config) { c.WorkerID = "" },
		"negative":   func(c *Config) { c.HeartbeatInterval = -time.Second },
		"no host":    func(c *Config) { c.ServerURL = "https:///x" },
		"bad escape": func(c *Config) { c.ServerURL = "https://%zz" },
	} {
		cfg := ok
		mutate(&cfg)
		if _, err := NewClient(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestClientURLs(t *testing.T) {
	c, err := NewClient(Config{ServerURL: "https://tether.example:8443/base/", TokenFile: "/t", JobID: "j", WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if c.registerURL != "https://tether.example:8443/base/v1/register" || c.sessionURL != "wss://tether.example:8443/base/v1/session" {
		t.Errorf("URLs %s %s", c.registerURL, c.sessionURL)
	}
}

func TestHeartbeatLeavesOutInvalidProgress(t *testing.T) {
	c, err := NewClient(Config{ServerURL: "https://x", TokenFile: "/t", JobID: "j", WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	step, big, nan := int64(3), 1.5, math.NaN()
	c.sample.Store(&progressSample{progress: &binding.Progress{Step: &step, Fraction: &big, Loss: &nan}, uploaded: -5})
	b, seq := c.heartbeatFrame()
	f, err := binding.DecodeFrame(b)
	if err != nil {
		t.Fatalf("heartbeat rejected: %v: %s", err, b)
	}
	hb := f.Heartbeat
	if seq != 1 || hb.Seq != 1 || hb.UploadedBytes != 0 || hb.Progress == nil || *hb.Progress.Step != 3 ||
		hb.Progress.Fraction != nil || hb.Progress.Loss != nil {
		t.Errorf("heartbeat = %s", b)
	}
}

func TestServerIntervalWinsWhenShorter(t *testing.T) {
	c, err := NewClient(Config{ServerURL: "https://x", TokenFile: "/t", JobID: "j", WorkerID: "w",
		HeartbeatInterval: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.noteRegistered(binding.RegisterResponse{HeartbeatInterval: binding.Duration{Duration: 20 * time.Second}, LastSeq: 7})
	if c.HeartbeatInterval() != 10*time.Second {
		t.Errorf("interval %v, want the configured 10s", c.HeartbeatInterval())
	}
	c.noteRegistered(binding.RegisterResponse{HeartbeatInterval: binding.Duration{Duration: 2 * time.Second}, LastSeq: 3})
	if c.HeartbeatInterval() != 2*time.Second {
		t.Errorf("interval %v, want the server's 2s", c.HeartbeatInterval())
	}
	if seq := c.nextSeq(); seq != 8 {
		t.Errorf("next seq %d, want 8 (never going back to the server's lower LastSeq)", seq)
	}
}

func TestPermanentErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		err  *PermanentError
		want string
	}{
		{&PermanentError{Op: "session", CloseCode: binding.CloseReplaced, CloseText: "newer"}, `session: server closed the session with 4001 (replaced by a newer session of this worker): "newer"`},
		{&PermanentError{Op: "register", StatusCode: 403, Response: &binding.ErrorResponse{Code: binding.ErrForbidden, Message: "other pod"}}, "register: HTTP 403: Forbidden: other pod"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestFinishWithKeepsTheReportWithinBounds(t *testing.T) {
	s := newStubServer(t)
	c := newTestClient(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	paths := []string{"", strings.Repeat("p", binding.MaxReportedPathLength+1)}
	for i := range 20 {
		paths = append(paths, fmt.Sprintf("checkpoints/%02d.pt", i))
	}
	long := strings.Repeat("é", binding.MaxArtifactErrorLength) // 2 bytes a rune
	if err := c.FinishWith(ctx, binding.Finishing{Reason: "SIGTERM", Unverified: paths, UnverifiedCount: 22, ArtifactError: long}); err != nil {
		t.Fatal(err)
	}
	f := waitEvent(t, s, binding.FrameFinishing).Finishing
	if len(f.Unverified) != binding.MaxReportedUnverified || f.Unverified[0] != "checkpoints/00.pt" || f.UnverifiedCount != 22 {
		t.Errorf("unverified %v (count %d): want the first %d valid paths and the whole count", f.Unverified, f.UnverifiedCount, binding.MaxReportedUnverified)
	}
	if len(f.ArtifactError) > binding.MaxArtifactErrorLength || !utf8.ValidString(f.ArtifactError) {
		t.Errorf("artifactError of %d bytes (valid UTF-8 %v)", len(f.ArtifactError), utf8.ValidString(f.ArtifactError))
	}
}
