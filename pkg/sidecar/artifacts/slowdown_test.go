package artifacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// slowStore is the binding server's artifact endpoint (endpoint.Handler) on an
// S3 backend: versitygw behind a proxy that answers PUTs with S3's
// "503 SlowDown" while slow is set, as a bucket over its request rate does.
type slowStore struct {
	url       string
	caPEM     []byte
	slow      atomic.Bool
	slowDowns atomic.Int64
	mu        sync.Mutex
	refusals  []string
}

func newSlowStore(t *testing.T, env *s3env, job string) *slowStore {
	t.Helper()
	s := &slowStore{}
	target, _ := url.Parse("https://" + env.addr)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.caPEM)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && s.slow.Load() {
			s.slowDowns.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
			return
		}
		rp.ServeHTTP(w, r) // Host is kept: the SigV4 signature names the proxy
	}))
	t.Cleanup(proxy.Close)
	backend, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: strings.TrimPrefix(proxy.URL, "http://"), AccessKey: adminKey, SecretKey: adminSecre,
		Region: "us-east-1", Bucket: upload.Bucket, Prefix: "backend/"})
	if err != nil {
		t.Fatal(err)
	}
	h := &endpoint.Handler{Store: store.New(backend, store.Options{}), Log: logr.Discard(),
		Authorize: func(context.Context, binding.Token) (endpoint.Job, error) {
			return endpoint.Job{Namespace: "ns", Name: "wb", JobID: job, Writable: true, Pods: map[int]string{0: testPodUID}}, nil
		},
		OnRefused: func(reason string) {
			s.mu.Lock()
			s.refusals = append(s.refusals, reason)
			s.mu.Unlock()
		}}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return s
}

// answers records the status and Retry-After of every PUT answer.
type answers struct {
	mu   sync.Mutex
	puts []answer
}

type answer struct {
	at         time.Time
	status     int
	retryAfter string
}

func (a *answers) wrap(rt http.RoundTripper) http.RoundTripper {
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if r.Method == http.MethodPut && resp != nil {
			a.mu.Lock()
			a.puts = append(a.puts, answer{time.Now(), resp.StatusCode, resp.Header.Get("Retry-After")})
			a.mu.Unlock()
		}
		return resp, err
	})
}

func (a *answers) list() []answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]answer(nil), a.puts...)
}

// A storage slow-down reaches the sidecar as 503 SlowDown with Retry-After,
// and the uploader waits that long before the next attempt (its own backoff
// here is at most 20 ms).
func TestSlowDownIsRetriedAfterRetryAfter(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	s := newSlowStore(t, env, job)
	dir := t.TempDir()
	writeFile(t, dir, "ckpt.pt", []byte("checkpoint"))
	var a answers
	u, _ := newTestUploader(t, env, job, uploaderOpts{url: s.url, caPEM: s.caPEM, wrap: a.wrap})
	s.slow.Store(true)
	go func() {
		// The storage recovers once it has refused a PUT.
		for s.slowDowns.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		s.slow.Store(false)
	}()
	res, err := u.UploadFile(context.Background(), newTestScanner(t, dir, nil).Root(), "ckpt.pt")
	if err != nil {
		t.Fatal(err)
	}
	puts := a.list()
	if res.Attempts != 2 || len(puts) != 2 {
		t.Fatalf("attempts %d, PUT answers %+v; want a refused PUT, then a verified one", res.Attempts, puts)
	}
	if puts[0].status != http.StatusServiceUnavailable || puts[0].retryAfter != "2" {
		t.Errorf("first PUT answered %d Retry-After %q, want 503 with Retry-After 2", puts[0].status, puts[0].retryAfter)
	}
	if gap := puts[1].at.Sub(puts[0].at); gap < endpoint.BackendRetryAfter-100*time.Millisecond {
		t.Errorf("retried %s after the SlowDown, before its Retry-After of %s", gap, endpoint.BackendRetryAfter)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refusals) != 1 || s.refusals[0] != "slow_down" {
		t.Errorf("refusals %v, want [slow_down]", s.refusals)
	}
}

// A final flush keeps retrying a slowed-down file until its deadline, past
// MaxAttempts, and its error says what a platform team can do; it never
// promises a next sync round.
func TestFinalFlushRetriesUntilDeadline(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	s := newSlowStore(t, env, job)
	s.slow.Store(true)
	dir := t.TempDir()
	writeFile(t, dir, "model.bin", []byte("weights"))
	var a answers
	u, _ := newTestUploader(t, env, job, uploaderOpts{url: s.url, caPEM: s.caPEM, wrap: a.wrap,
		cfg: func(c *UploaderConfig) { c.MaxAttempts = 2 }})
	sc := newTestScanner(t, dir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := newTestSyncer(t, sc, u, job).Flush(ctx)
	if err == nil || len(rep.Failed) != 1 {
		t.Fatalf("flush: %v, failed %v; want model.bin not verified", err, rep.Failed)
	}
	fe := rep.Failed[0]
	if fe.Attempts <= 2 {
		t.Errorf("%d attempts in the final flush, want more than MaxAttempts (2): it retries until its deadline", fe.Attempts)
	}
	if !errors.Is(fe.Err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the deadline", fe.Err)
	}
	for _, want := range []string{"slow down", "request limits", "final flush", "terminationGracePeriodSeconds"} {
		if !strings.Contains(fe.Hint, want) {
			t.Errorf("hint %q does not say %q", fe.Hint, want)
		}
	}
	if strings.Contains(fe.Error(), "next sync round") {
		t.Errorf("a final flush's error promises a next round: %s", fe.Error())
	}
	t.Logf("final flush: %d attempts (%d PUT answers, all 503 SlowDown) before the 5 s deadline; %s", fe.Attempts, len(a.list()), fe.Error())
}
