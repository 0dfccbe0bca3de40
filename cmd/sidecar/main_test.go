package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/pkg/binding"
)

// stub is a minimal binding server that exists only to drive the sidecar
// binary's main loop in these tests; it is not the real server
// (pkg/binding/server), whose integration tests come separately.
type stub struct {
	srv        *httptest.Server
	registerFn func(w http.ResponseWriter) bool // true: handled
	frames     chan binding.Frame               // every frame the client sent
	closes     chan int
	pushFlush  bool
}

func newStub(t *testing.T, setup func(*stub)) (*stub, string) {
	t.Helper()
	s := &stub{frames: make(chan binding.Frame, 256), closes: make(chan int, 4)}
	if setup != nil {
		setup(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+binding.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		if tok, err := binding.TokenFromHeader(r.Header); err != nil || tok != testToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if s.registerFn != nil && s.registerFn(w) {
			return
		}
		_ = json.NewEncoder(w).Encode(binding.RegisterResponse{JobID: "job-1", WorkerID: "worker-0", Phase: "Running",
			HeartbeatInterval: binding.Duration{Duration: 50 * time.Millisecond}})
	})
	mux.HandleFunc("GET "+binding.PathSession, func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		conn.SetCloseHandler(func(code int, _ string) error {
			s.closes <- code
			return conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
		})
		pushed := false
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			f, err := binding.DecodeFrame(data)
			if err != nil {
				t.Errorf("malformed frame from the sidecar: %v", err)
				return
			}
			s.frames <- f
			if f.Type == binding.FrameHeartbeat {
				b, _ := json.Marshal(binding.Frame{Type: binding.FrameAck, Ack: &binding.Ack{Seq: f.Heartbeat.Seq, Phase: "Running"}})
				_ = conn.WriteMessage(websocket.TextMessage, b)
				if s.pushFlush && !pushed {
					pushed = true
					b, _ := json.Marshal(binding.Frame{Type: binding.FrameCommand, Command: &binding.Command{ID: "c1", Name: binding.CommandFlush}})
					_ = conn.WriteMessage(websocket.TextMessage, b)
				}
			}
		}
	})
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}))
}

func (s *stub) waitFrame(t *testing.T, typ string) binding.Frame {
	t.Helper()
	timeout := time.After(3 * time.Second)
	for {
		select {
		case f := <-s.frames:
			if f.Type == typ {
				return f
			}
		case <-timeout:
			t.Fatalf("no %s frame from the sidecar", typ)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// start runs the sidecar; the returned channel yields its exit code.
func start(t *testing.T, env map[string]string, sigs chan os.Signal) (<-chan int, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	code := make(chan int, 1)
	go func() { code <- run(getenv(env), out, sigs, func() {}) }()
	t.Cleanup(func() {
		if strings.Contains(out.String(), testToken) {
			t.Error("the token appears in the sidecar's logs")
		}
		if t.Failed() {
			t.Logf("sidecar logs:\n%s", out)
		}
	})
	return code, out
}

func waitExit(t *testing.T, code <-chan int) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(finishTimeout + stopTimeout + time.Second):
		t.Fatal("the sidecar did not exit")
		return -1
	}
}

func TestSidecarStopsCleanlyOnSIGTERM(t *testing.T) {
	s, ca := newStub(t, func(s *stub) { s.pushFlush = true })
	env := testEnv(t, s.srv.URL, ca)
	if err := os.WriteFile(env[binding.EnvArtifactDir]+"/"+binding.ProgressFile, []byte(`{"step":12,"fraction":0.1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	code, _ := start(t, env, sigs)

	ack := s.waitFrame(t, binding.FrameCommandAck).CommandAck
	if ack.ID != "c1" || ack.OK || ack.Error != errArtifactSyncNotImplemented.Error() {
		t.Errorf("flush ack = %+v, want OK false: %v", ack, errArtifactSyncNotImplemented)
	}
	for {
		hb := s.waitFrame(t, binding.FrameHeartbeat).Heartbeat
		if hb.Progress != nil && hb.Progress.Step != nil && *hb.Progress.Step == 12 {
			break
		}
	}
	started := time.Now()
	sigs <- syscall.SIGTERM
	if f := s.waitFrame(t, binding.FrameFinishing); f.Finishing.Reason != "SIGTERM" {
		t.Errorf("finishing = %+v", f.Finishing)
	}
	if c := waitExit(t, code); c != 0 {
		t.Errorf("exit code %d, want 0", c)
	}
	if d := time.Since(started); d > 2*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	select {
	case c := <-s.closes:
		if c != websocket.CloseNormalClosure {
			t.Errorf("close code %d, want 1000", c)
		}
	case <-time.After(time.Second):
		t.Error("no close frame")
	}
}

func TestSidecarExitsOnPermanentRefusal(t *testing.T) {
	s, ca := newStub(t, func(s *stub) {
		s.registerFn = func(w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusForbidden)
			_ = json.NewEncoder(w).Encode(binding.ErrorResponse{Code: binding.ErrForbidden, Message: "this token belongs to another job or worker"})
			return true
		}
	})
	code, out := start(t, testEnv(t, s.srv.URL, ca), make(chan os.Signal))
	if c := waitExit(t, code); c != 1 {
		t.Errorf("exit code %d, want 1", c)
	}
	if !strings.Contains(out.String(), binding.ErrForbidden) {
		t.Errorf("the logs do not say why:\n%s", out)
	}
}

// A finished binding is not an error: the sidecar idles until the pod
// terminates, because the kubelet restarts a native sidecar whenever it
// exits and it would crash-loop against the 410.
func TestSidecarIdlesAfterBindingFinished(t *testing.T) {
	s, ca := newStub(t, func(s *stub) {
		s.registerFn = func(w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusGone)
			_ = json.NewEncoder(w).Encode(binding.ErrorResponse{Code: binding.ErrBindingFinished, Message: "job succeeded"})
			return true
		}
	})
	sigs := make(chan os.Signal, 1)
	code, out := start(t, testEnv(t, s.srv.URL, ca), sigs)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "idle until the pod terminates") {
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar did not go idle:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case c := <-code:
		t.Fatalf("the sidecar exited (%d) instead of idling", c)
	case <-time.After(200 * time.Millisecond):
	}
	sigs <- syscall.SIGTERM
	if c := waitExit(t, code); c != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", c)
	}
}

func TestSidecarRejectsBadConfig(t *testing.T) {
	env := testEnv(t, "https://tether.example", selfSignedPEM(t))
	delete(env, binding.EnvWorkerID)
	code, out := start(t, env, make(chan os.Signal))
	if c := waitExit(t, code); c != 2 {
		t.Errorf("exit code %d, want 2", c)
	}
	if !strings.Contains(out.String(), binding.EnvWorkerID) {
		t.Errorf("the logs do not name the variable:\n%s", out)
	}
}
