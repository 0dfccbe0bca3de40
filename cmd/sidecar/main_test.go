package main

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// stub is a minimal binding server that exists only to drive the sidecar
// binary's main loop in these tests; it is not the real server
// (pkg/bindingserver, pkg/artifactstore), whose integration tests come
// separately. Its artifact endpoint keeps objects in memory; pkg/sidecar/artifacts'
// tests run the uploader against a real S3 server.
type stub struct {
	srv        *httptest.Server
	registerFn func(w http.ResponseWriter) bool // true: handled
	frames     chan binding.Frame               // every frame the client sent
	closes     chan int
	pushFlush  bool
	push       []binding.Command // pushed after the first heartbeat (pushFlush: a flush)
	refuseS3   bool              // answer every PUT 403 AccessDenied
	// takeOver closes the first session with 4001 after its first
	// heartbeat, as the server does when another session opens.
	takeOver  bool
	sessions  atomic.Int32
	registers atomic.Int32
	s3Delay   time.Duration // before answering a PUT

	objMu   sync.Mutex
	objects map[string][]byte // by key
	puts    []string          // keys stored, in order (a PUT storing nothing is not one)
}

func (s *stub) object(key string) ([]byte, bool) {
	s.objMu.Lock()
	defer s.objMu.Unlock()
	b, ok := s.objects[key]
	return b, ok
}

func (s *stub) putKeys() []string {
	s.objMu.Lock()
	defer s.objMu.Unlock()
	return append([]string(nil), s.puts...)
}

// artifacts serves the artifact endpoint: token first, then the job's
// prefix, before the body is read (docs/artifacts.md).
func (s *stub) artifacts(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/"+upload.Bucket+"/")
	s3err := func(status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, "<Error><Code>%s</Code><Message>refused by the stub</Message><Key>%s</Key><RequestId>1</RequestId></Error>", code, key)
		}
	}
	switch {
	case r.Header.Get(names.HeaderArtifactToken) != testToken:
		s3err(http.StatusUnauthorized, "AccessDenied")
		return
	case !strings.HasPrefix(key, "job-1/"), s.refuseS3 && r.Method == http.MethodPut:
		s3err(http.StatusForbidden, "AccessDenied")
		return
	}
	if r.Method == http.MethodHead {
		b, ok := s.object(key)
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		sum := md5.Sum(b)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat)) // minio-go requires it
		return
	}
	if r.ContentLength < 0 || len(r.TransferEncoding) > 0 {
		s3err(http.StatusLengthRequired, "MissingContentLength")
		return
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	select {
	case <-time.After(s.s3Delay):
	case <-r.Context().Done():
		return
	}
	s.objMu.Lock()
	// As the binding server does: a PUT whose Content-MD5 is what the key
	// holds is verified and stores nothing (docs/artifacts.md).
	sum := md5.Sum(b)
	if old, ok := s.objects[key]; !ok || md5.Sum(old) != sum ||
		r.Header.Get("Content-Md5") != base64.StdEncoding.EncodeToString(sum[:]) {
		s.objects[key] = b
		s.puts = append(s.puts, key)
	}
	s.objMu.Unlock()
	w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
}

func newStub(t *testing.T, setup func(*stub)) (*stub, string) {
	t.Helper()
	s := &stub{frames: make(chan binding.Frame, 256), closes: make(chan int, 4), objects: map[string][]byte{}}
	if setup != nil {
		setup(s)
	}
	if s.pushFlush {
		s.push = append(s.push, binding.Command{ID: "c1", Name: binding.CommandFlush})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /"+upload.Bucket+"/", s.artifacts)
	mux.HandleFunc("HEAD /"+upload.Bucket+"/", s.artifacts)
	mux.HandleFunc("POST "+binding.PathRegister, func(w http.ResponseWriter, r *http.Request) {
		if tok, err := binding.TokenFromHeader(r.Header); err != nil || tok != testToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		s.registers.Add(1)
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
		n := s.sessions.Add(1)
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
				if s.takeOver && n == 1 {
					_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(binding.CloseReplaced, "replaced by a newer session of the same worker"), time.Now().Add(time.Second))
					return
				}
				if !pushed {
					pushed = true
					for _, c := range s.push {
						b, _ := json.Marshal(binding.Frame{Type: binding.FrameCommand, Command: &c})
						_ = conn.WriteMessage(websocket.TextMessage, b)
					}
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
	if err := os.WriteFile(env[names.EnvArtifactDir]+"/"+binding.ProgressFile, []byte(`{"step":12,"fraction":0.1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	code, _ := start(t, env, sigs)

	// The progress file is being written (not settled): nothing to flush
	// yet, and nothing failed.
	ack := s.waitFrame(t, binding.FrameCommandAck).CommandAck
	if ack.ID != "c1" || !ack.OK {
		t.Errorf("flush ack = %+v, want OK", ack)
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
	// Not a speed target: only that shutdown does not wait out the whole
	// flush budget (25s) when there is nothing left to do.
	if d := time.Since(started); d > 20*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	// The final flush took the progress file, then the manifest, last.
	if got := s.putKeys(); !slices.Equal(got, []string{"job-1/" + binding.ProgressFile, "job-1/manifest.json"}) {
		t.Errorf("PUTs %q", got)
	}
	checkManifest(t, s, map[string]string{binding.ProgressFile: `{"step":12,"fraction":0.1}` + "\n"})
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

// TestSidecarKeepsWorkingAfterItsSessionIsTakenOver: one session open with
// the job's token closed the sidecar's with 4001, and it used to take that for
// the binding's end: no more syncing, no final flush, no manifest. It opens
// its session again and, at SIGTERM, flushes and uploads the manifest.
func TestSidecarKeepsWorkingAfterItsSessionIsTakenOver(t *testing.T) {
	s, ca := newStub(t, func(s *stub) { s.takeOver = true })
	env := testEnv(t, s.srv.URL, ca)
	if err := os.WriteFile(env[names.EnvArtifactDir]+"/model.pt", []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	code, out := start(t, env, sigs)
	deadline := time.Now().Add(5 * time.Second)
	for s.sessions.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar did not open its session again after 4001:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.waitFrame(t, binding.FrameHeartbeat)
	sigs <- syscall.SIGTERM
	s.waitFrame(t, binding.FrameFinishing)
	if c := waitExit(t, code); c != 0 {
		t.Errorf("exit code %d, want 0", c)
	}
	checkManifest(t, s, map[string]string{"model.pt": "weights"})
	if n := s.registers.Load(); n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
	if !strings.Contains(out.String(), "session taken over") {
		t.Errorf("the log does not say the session was taken over:\n%s", out)
	}
}

func TestSidecarRejectsBadConfig(t *testing.T) {
	env := testEnv(t, "https://tether.example", selfSignedPEM(t))
	delete(env, names.EnvWorkerID)
	code, out := start(t, env, make(chan os.Signal))
	if c := waitExit(t, code); c != 2 {
		t.Errorf("exit code %d, want 2", c)
	}
	if !strings.Contains(out.String(), names.EnvWorkerID) {
		t.Errorf("the logs do not name the variable:\n%s", out)
	}
}

// checkManifest: the stub holds a manifest listing exactly files (path →
// content), each stored with that content.
func checkManifest(t *testing.T, s *stub, files map[string]string) {
	t.Helper()
	b, ok := s.object("job-1/" + upload.ManifestName)
	if !ok {
		t.Fatal("no manifest stored")
	}
	var m upload.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Version != upload.ManifestVersion || m.JobID != "job-1" || len(m.Files) != len(files) {
		t.Fatalf("manifest %s", b)
	}
	for _, f := range m.Files {
		content, want := files[f.Path]
		sum := md5.Sum([]byte(content))
		stored, ok := s.object("job-1/" + f.Path)
		if !want || f.MD5 != hex.EncodeToString(sum[:]) || f.Size != int64(len(content)) || !ok || string(stored) != content {
			t.Errorf("manifest entry %+v: want content %q, stored %q", f, content, stored)
		}
	}
}

// The periodic sync uploads settled files; heartbeats carry the verified
// bytes and the checkpoint; drain uploads everything and the manifest; SIGTERM does it again.
func TestSidecarSyncsArtifacts(t *testing.T) {
	s, ca := newStub(t, nil)
	env := testEnv(t, s.srv.URL, ca)
	env[EnvSyncInterval], env[EnvSettleTime] = "30ms", "60ms"
	env[names.EnvExclude] = "tmp/**,**/*.partial"
	dir := env[names.EnvArtifactDir]
	files := map[string]string{
		"model.safetensors":     "weights",
		"ckpt/step 100/opt.pt":  "optimizer state",
		"-dash/ünïcødé.json":    `{"a":1}`,
		"tmp/scratch.bin":       "excluded",
		"ckpt/step-200.partial": "excluded",
	}
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sigs := make(chan os.Signal, 1)
	code, _ := start(t, env, sigs)

	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := s.object("job-1/ckpt/step 100/opt.pt"); ok {
			if _, ok := s.object("job-1/model.safetensors"); ok {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the periodic sync did not upload the files; PUTs %q", s.putKeys())
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := int64(len("weights") + len("optimizer state") + len(`{"a":1}`))
	for {
		hb := s.waitFrame(t, binding.FrameHeartbeat).Heartbeat
		if hb.UploadedBytes == want {
			break
		}
		if hb.UploadedBytes > want || time.Now().After(deadline) {
			t.Fatalf("heartbeat uploadedBytes %d, want %d", hb.UploadedBytes, want)
		}
	}
	// "ckpt/step 100/" is a checkpoint by the default patterns, its one
	// file verified: heartbeats report it once a round has seen it so.
	wantCkpt := binding.Checkpoint{Path: "ckpt/step 100/", Step: 100, Files: 1, Bytes: int64(len("optimizer state"))}
	for {
		hb := s.waitFrame(t, binding.FrameHeartbeat).Heartbeat
		if cp := hb.Checkpoint; cp != nil && !cp.VerifiedAt.IsZero() {
			cp.VerifiedAt = time.Time{}
			if *cp != wantCkpt {
				t.Fatalf("heartbeat checkpoint %+v, want %+v", *cp, wantCkpt)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat carried the checkpoint %+v", wantCkpt)
		}
	}
	for _, k := range s.putKeys() {
		if strings.Contains(k, "tmp/") || strings.HasSuffix(k, ".partial") || strings.HasSuffix(k, upload.ManifestName) {
			t.Errorf("%s uploaded by the periodic sync", k)
		}
	}

	sigs <- syscall.SIGTERM
	if c := waitExit(t, code); c != 0 {
		t.Errorf("exit code %d", c)
	}
	checkManifest(t, s, map[string]string{
		"model.safetensors": "weights", "ckpt/step 100/opt.pt": "optimizer state", "-dash/ünïcødé.json": `{"a":1}`,
	})
	if n := len(s.putKeys()); n != 4 {
		t.Errorf("PUTs %q: every file once, then the manifest", s.putKeys())
	}
}

// drain and cancel flush everything and the manifest before they are
// acknowledged; a refused upload makes the ack fail with the file's error.
func TestSidecarCommands(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refuse   bool
		command  string
		manifest bool
		stored   bool // the object is already stored (a restarted sidecar)
	}{
		{"drain after restart", false, binding.CommandDrain, true, true},
		{"drain", false, binding.CommandDrain, true, false},
		{"cancel", false, binding.CommandCancel, true, false},
		{"flush refused", true, binding.CommandFlush, false, false},
		{"drain refused", true, binding.CommandDrain, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ca := newStub(t, func(s *stub) {
				s.refuseS3 = tc.refuse
				s.push = []binding.Command{{ID: "c9", Name: tc.command}}
				if tc.stored {
					s.objects["job-1/final.bin"] = []byte("final")
				}
			})
			env := testEnv(t, s.srv.URL, ca)
			p := filepath.Join(env[names.EnvArtifactDir], "final.bin")
			if err := os.WriteFile(p, []byte("final"), 0o644); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-time.Hour) // settled: flush takes it too
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
			sigs := make(chan os.Signal, 1)
			code, _ := start(t, env, sigs)
			ack := s.waitFrame(t, binding.FrameCommandAck).CommandAck
			if ack.ID != "c9" || ack.OK == tc.refuse {
				t.Errorf("ack %+v", ack)
			}
			if tc.refuse && !strings.Contains(ack.Error, "final.bin") {
				t.Errorf("ack error %q does not name the file", ack.Error)
			}
			if _, ok := s.object("job-1/" + upload.ManifestName); ok != tc.manifest {
				t.Errorf("manifest stored: %v, want %v", ok, tc.manifest)
			}
			if tc.manifest {
				checkManifest(t, s, map[string]string{"final.bin": "final"})
			}
			if tc.stored && !slices.Equal(s.putKeys(), []string{"job-1/" + upload.ManifestName}) {
				t.Errorf("stored %q; want only the manifest: the file was already stored", s.putKeys())
			}
			sigs <- syscall.SIGTERM
			if c := waitExit(t, code); c != 0 {
				t.Errorf("exit code %d", c)
			}
		})
	}
}

// The final flush is bounded by TETHER_FLUSH_BUDGET: past it, the sidecar
// logs what is missing and exits 0 without a manifest.
func TestSidecarFlushBudget(t *testing.T) {
	s, ca := newStub(t, func(s *stub) { s.s3Delay = 400 * time.Millisecond })
	env := testEnv(t, s.srv.URL, ca)
	env[EnvFlushBudget] = "600ms"
	env[EnvUploadWorkers] = "2" // six 400ms uploads, two at a time, cannot fit in the budget
	for _, n := range []string{"a.bin", "b.bin", "c.bin", "d.bin", "e.bin", "f.bin"} {
		if err := os.WriteFile(filepath.Join(env[names.EnvArtifactDir], n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sigs := make(chan os.Signal, 1)
	code, out := start(t, env, sigs)
	s.waitFrame(t, binding.FrameHeartbeat)
	started := time.Now()
	sigs <- syscall.SIGTERM
	if c := waitExit(t, code); c != 0 {
		t.Errorf("exit code %d", c)
	}
	if d := time.Since(started); d > 600*time.Millisecond+stopTimeout {
		t.Errorf("shutdown took %v", d)
	}
	if _, ok := s.object("job-1/" + upload.ManifestName); ok {
		t.Error("a manifest was stored although files are missing")
	}
	logs := out.String()
	if !strings.Contains(logs, "artifacts incomplete: no verified manifest") || !strings.Contains(logs, `"msg":"artifact missing","path":"f.bin"`) {
		t.Errorf("the logs do not name what is missing:\n%s", logs)
	}
}
