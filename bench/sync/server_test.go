package sync_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/internal/benchutil"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/pkg/upload/store"
)

// server is the artifact endpoint as the binding server serves it
// (bench/upload's setup: store.Handler on the fs backend, TLS on
// 127.0.0.1, the binding server's http.Server timeouts), recording when it
// answered each PUT 200: stored, fsynced and its ETag checked.
type server struct {
	url, token, jobID string
	tokenFile, caFile string
	backend           store.FSBackend
	mu                sync.Mutex
	verifiedAt        map[string]time.Time // key → when its PUT was answered 200 (the first time)
	puts              atomic.Int64         // PUTs answered 200
	firstPut, lastPut atomic.Int64         // unix nanoseconds
	registerRefused   atomic.Int64
}

func randHex(b testing.TB, n int) string {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(buf)
}

func startServer(b testing.TB, storeParent string) *server {
	b.Helper()
	dir := b.TempDir()
	storeRoot := filepath.Join(dir, "store")
	if storeParent != "" {
		d, err := os.MkdirTemp(storeParent, "tether-bench-sync-store-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(d) })
		storeRoot = d
	}
	// The store as the control plane opens it (--artifact-backend fs).
	backend, err := store.NewFSBackend(storeRoot)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	s := &server{token: randHex(b, 32), jobID: "bench-" + randHex(b, 6), backend: backend,
		verifiedAt: map[string]time.Time{}}
	certPEM, keyPEM := benchutil.SelfSignedCert(b)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	s.tokenFile, s.caFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(s.tokenFile, []byte(s.token), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(s.caFile, certPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	h := &store.Handler{
		Backend: s.backend,
		// Stand-in for the binding server's token -> WorkerBinding lookup.
		Authorize: func(_ context.Context, token binding.Token) (store.Job, error) {
			if string(token) != s.token {
				return store.Job{}, store.Unauthorized("no binding holds this token")
			}
			return store.Job{Namespace: "tether-bench", Name: "bench-worker-0", JobID: s.jobID, Writable: true}, nil
		},
		Log: logr.Discard(),
	}
	// The binding protocol is not what is measured: registration is
	// answered "busy, come back in an hour", so a sidecar process keeps its
	// session client waiting and syncs meanwhile, as it does while the
	// control plane is unreachable.
	busy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == binding.PathRegister {
			s.registerRefused.Add(1)
		}
		w.Header().Set("Retry-After", "3600")
		http.Error(w, `{"code":"Unavailable","message":"benchmark: no binding protocol"}`, http.StatusServiceUnavailable)
	})
	route := store.Route(h, busy)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	tlsLn := tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			route.ServeHTTP(rec, r)
			if r.Method == http.MethodPut && rec.status == http.StatusOK {
				s.notePut(strings.TrimPrefix(r.URL.Path, "/"+upload.Bucket+"/"), time.Now())
			}
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tlsLn)
	}()
	b.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	s.url = "https://" + ln.Addr().String()
	return s
}

func (s *server) notePut(key string, at time.Time) {
	s.mu.Lock()
	if _, ok := s.verifiedAt[key]; !ok {
		s.verifiedAt[key] = at
	}
	s.mu.Unlock()
	if s.puts.Add(1) == 1 {
		s.firstPut.Store(at.UnixNano())
	}
	s.lastPut.Store(at.UnixNano())
}

func (s *server) verified(key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.verifiedAt[key]
	return t, ok
}

func (s *server) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.verifiedAt, key)
}

func (s *server) key(rel string) string { return s.jobID + "/" + rel }

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote && code >= 200 {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
