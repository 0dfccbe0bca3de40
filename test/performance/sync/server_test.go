package sync_test

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/benchutil"
)

// server is the artifact endpoint as the binding server serves it
// (benchutil.ArtifactServer), recording when it answered each PUT 200:
// stored, fsynced and its ETag checked.
type server struct {
	url, token, jobID string
	tokenFile, caFile string
	backend           fsstore.FSBackend
	mu                sync.Mutex
	verifiedAt        map[string]time.Time // key → when its PUT was answered 200 (the first time)
	puts              atomic.Int64         // PUTs answered 200
	firstPut, lastPut atomic.Int64         // unix nanoseconds
	registerRefused   atomic.Int64
}

func startServer(b testing.TB, storeParent string) *server {
	b.Helper()
	var s *server
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
	recordPuts := func(route http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			route.ServeHTTP(rec, r)
			if r.Method == http.MethodPut && rec.status == http.StatusOK {
				s.notePut(strings.TrimPrefix(r.URL.Path, "/"+upload.Bucket+"/"), time.Now())
			}
		})
	}
	as := benchutil.StartArtifactServer(b, benchutil.ArtifactServerOptions{
		StoreParent: storeParent, JobIDBytes: 6, Others: busy, WrapHandler: recordPuts})
	s = &server{url: as.URL, token: as.Token, jobID: as.JobID, tokenFile: as.TokenFile, caFile: as.CAFile,
		backend: as.Backend, verifiedAt: map[string]time.Time{}}
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
