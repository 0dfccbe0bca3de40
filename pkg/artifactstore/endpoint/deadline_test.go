package endpoint

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
)

// slowReader returns chunk bytes every interval.
type slowReader struct {
	left     int
	chunk    int
	interval time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.interval)
	n := min(len(p), s.chunk, s.left)
	clear(p[:n])
	s.left -= n
	return n, nil
}

// TestHandlerDeadlines: a body that keeps making progress outlives the
// server's ReadTimeout/WriteTimeout (the binding server sets 30 s); a body
// that stalls longer than IdleTimeout fails and leaves nothing.
func TestHandlerDeadlines(t *testing.T) {
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()}, func(h *Handler, srv *httptest.Server) {
		srv.Config.ReadTimeout = 300 * time.Millisecond
		srv.Config.WriteTimeout = 300 * time.Millisecond
		h.IdleTimeout = 400 * time.Millisecond
	})
	const size = 12 * 1024
	body := &slowReader{left: size, chunk: 1024, interval: 100 * time.Millisecond}
	resp := e.raw("PUT", "/tether-artifacts/job-a/slow.bin", tokenA, body, size, nil)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("slow upload: %d %s", resp.StatusCode, b)
	}
	e.wantObject("job-a/slow.bin", make([]byte, size))

	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write(make([]byte, 1000))
		time.Sleep(1500 * time.Millisecond)
		_ = pw.CloseWithError(io.ErrClosedPipe)
	}()
	req, _ := http.NewRequest("PUT", e.srv.URL+"/tether-artifacts/job-a/stalled.bin", pr)
	req.ContentLength = 2000
	req.Header.Set(names.HeaderArtifactToken, tokenA)
	req.Header.Set(names.HeaderArtifactPodUID, testPod)
	start := time.Now()
	n := e.started.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := (&http.Client{Transport: e.transport()}).Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Error("a stalled upload succeeded")
			}
		}
	}()
	e.waitHandled(n)
	if d := time.Since(start); d > 1200*time.Millisecond {
		t.Errorf("the handler gave the stalled upload up after %v, want about IdleTimeout (400ms)", d)
	}
	<-done
	e.wantAbsent("job-a/stalled.bin")
}
