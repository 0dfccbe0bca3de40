package store

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
)

// presigning is a backend that can presign, and whose start-up probe says
// whether its presigned PUTs can be verified (DirectUploads).
type presigning struct {
	fsstore.FSBackend
	verifiable bool
}

func (presigning) PresignPut(context.Context, string, int64, time.Duration) (*url.URL, http.Header, error) {
	return &url.URL{Scheme: "https", Host: "127.0.0.1"}, nil, nil
}

func (p presigning) DirectUploads() bool { return p.verifiable }

// DirectTTL is what the sweep waits out: the URLs' lifetime whenever the
// backend presigns, whether or not direct uploads are on now.
func TestDirectTTL(t *testing.T) {
	fs := fsstore.FSBackend{Root: t.TempDir()}
	if ttl := New(fs, Options{}).DirectTTL(); ttl != 0 {
		t.Errorf("fs backend: DirectTTL %s, want 0 (it presigns nothing)", ttl)
	}
	p := presigning{FSBackend: fs, verifiable: true}
	if ttl := New(p, Options{}).DirectTTL(); ttl != DefaultDirectTTL {
		t.Errorf("presigning backend, no TTL set: DirectTTL %s, want %s", ttl, DefaultDirectTTL)
	}
	if ttl := New(p, Options{Direct: DirectOptions{TTL: 3 * time.Second, Disabled: true}}).DirectTTL(); ttl != 3*time.Second {
		t.Errorf("direct uploads off: DirectTTL %s, want 3s (URLs from before still live)", ttl)
	}
}

// Presigner is nil whenever bodies must go through the server.
func TestPresigner(t *testing.T) {
	fs := fsstore.FSBackend{Root: t.TempDir()}
	for _, c := range []struct {
		name string
		s    *Store
		want bool
	}{
		{"fs backend", New(fs, Options{}), false},
		{"presigning", New(presigning{FSBackend: fs, verifiable: true}, Options{}), true},
		{"disabled", New(presigning{FSBackend: fs, verifiable: true}, Options{Direct: DirectOptions{Disabled: true}}), false},
		{"probe found them unverifiable", New(presigning{FSBackend: fs}, Options{}), false},
	} {
		if got := c.s.Presigner() != nil; got != c.want {
			t.Errorf("%s: presigns %v, want %v", c.name, got, c.want)
		}
	}
}

// WaitReady waits for the probe, at most until the request ends.
func TestWaitReady(t *testing.T) {
	if !New(nil, Options{}).WaitReady(t.Context()) {
		t.Error("without a probe: not ready")
	}
	probed := make(chan struct{})
	s := New(nil, Options{Ready: probed})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if s.WaitReady(ctx) {
		t.Error("before the probe, the request gone: ready")
	}
	go func() { time.Sleep(10 * time.Millisecond); close(probed) }()
	if !s.WaitReady(t.Context()) {
		t.Error("the probe done while waiting: not ready")
	}
}

// The access log gets what the endpoint records, and only if kept.
func TestAccessLog(t *testing.T) {
	quiet := New(nil, Options{})
	if quiet.LogsAccess() {
		t.Error("no OnAccess: logs access")
	}
	quiet.LogAccess(AccessRecord{}) // no log: nothing to call
	var got []AccessRecord
	s := New(nil, Options{OnAccess: func(a AccessRecord) { got = append(got, a) }})
	if !s.LogsAccess() {
		t.Error("OnAccess set: does not log access")
	}
	s.LogAccess(AccessRecord{Key: "job/a", Code: "AccessDenied"})
	if len(got) != 1 || got[0].Key != "job/a" || got[0].Outcome() != "AccessDenied" {
		t.Errorf("logged %+v", got)
	}
	if o := (AccessRecord{}).Outcome(); o != "ok" {
		t.Errorf("a success's outcome %q, want ok", o)
	}
}
