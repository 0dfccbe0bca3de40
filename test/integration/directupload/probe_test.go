package directupload

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// storeSwitch is the store's address as the control plane reaches it: down
// (every connection closed at once, as an unreachable store) until up,
// then a byte-for-byte relay to the store.
type storeSwitch struct {
	ln     net.Listener
	target string
	up     atomic.Bool
}

func newStoreSwitch(t *testing.T) *storeSwitch {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &storeSwitch{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !s.up.Load() {
				_ = c.Close()
				continue
			}
			go s.relay(c)
		}
	}()
	return s
}

func (s *storeSwitch) relay(c net.Conn) {
	defer c.Close()
	d, err := net.Dial("tcp", s.target)
	if err != nil {
		return
	}
	defer d.Close()
	go func() { _, _ = io.Copy(d, c); _ = d.(*net.TCPConn).CloseWrite() }()
	_, _ = io.Copy(c, d)
}

// TestStoreProbeDoesNotHoldSessions: a replica that starts while its store
// is unreachable serves registrations and heartbeats at once (before, it
// served nothing until the start-up probe succeeded, and gave up after a
// minute); an artifact request meanwhile is answered 503 with Retry-After,
// nothing done; once the store is back the probe succeeds and the job's
// artifacts are stored and verified.
func TestStoreProbeDoesNotHoldSessions(t *testing.T) {
	sw := newStoreSwitch(t)
	s := start(t, func(o *controlplane.Options) {
		sw.target, o.S3.Endpoint = o.S3.Endpoint, sw.ln.Addr().String()
	})
	j := s.newJob(t, "store-down-at-start")
	j.register(t) // Running: the session is served with the store down

	resp := j.askAuthorize(t, "checkpoints/step-1.pt", 4)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "has not finished probing the artifact store") {
		t.Fatalf("an upload before the store was probed: %d (Retry-After %q) %s; want 503 with Retry-After naming the probe",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if keys := s.keys(t, j.jobID+"/"); len(keys) != 0 {
		t.Fatalf("the store holds %v of a job whose uploads were refused", keys)
	}

	sw.up.Store(true)
	testenv.Eventually(t, 30*time.Second, func() error {
		resp := j.askAuthorize(t, "checkpoints/step-1.pt", 4)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return &statusError{resp.StatusCode}
		}
		return nil
	})
	if err := os.WriteFile(filepath.Join(j.artifactDir, "model.bin"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	j.flush(t)
	j.succeed(t)
	if keys := s.keys(t, j.jobID+"/"); !slices.Contains(keys, j.jobID+"/model.bin") {
		t.Fatalf("after the store came back the job's artifacts are %v, want its model.bin", keys)
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return "authorize answered " + http.StatusText(e.code) }
