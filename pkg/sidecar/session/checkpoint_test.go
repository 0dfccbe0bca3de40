package session

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

func TestHeartbeatsCarryTheCheckpoint(t *testing.T) {
	s := newStubServer(t)
	s.session = func(ss *stubSession) {
		for {
			f, ok := ss.next() // fails the test on a frame the server would reject
			if !ok {
				return
			}
			if f.Type == binding.FrameHeartbeat {
				ss.ack(f.Heartbeat.Seq)
			}
		}
	}
	var latest atomic.Pointer[binding.Checkpoint]
	c := newTestClient(t, s, func(cfg *Config) { cfg.Checkpoint = latest.Load })
	_, stop := startRun(t, c)
	last := func() (binding.Heartbeat, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.heartbeats) == 0 {
			return binding.Heartbeat{}, false
		}
		return s.heartbeats[len(s.heartbeats)-1], true
	}
	eventually(t, "a heartbeat", func() bool { _, ok := last(); return ok })
	if hb, _ := last(); hb.Checkpoint != nil {
		t.Fatalf("heartbeat carries checkpoint %+v before there is one", *hb.Checkpoint)
	}
	want := binding.Checkpoint{Path: "out/checkpoint-500/", Step: 500, Files: 3, Bytes: 4096, VerifiedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	latest.Store(&want)
	eventually(t, "a heartbeat with the checkpoint", func() bool {
		hb, _ := last()
		return hb.Checkpoint != nil && *hb.Checkpoint == want
	})
	if err := stop(); err != nil {
		t.Errorf("Run = %v after cancel, want nil", err)
	}
}

func TestHeartbeatLeavesOutAnInvalidCheckpoint(t *testing.T) {
	c, err := NewClient(Config{ServerURL: "https://x", TokenFile: "/t", JobID: "j", WorkerID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	c.sample.Store(&progressSample{uploaded: 10, checkpoint: &binding.Checkpoint{Path: "checkpoint-1/", Step: 1, Files: 0}})
	b, _ := c.heartbeatFrame()
	f, err := binding.DecodeFrame(b)
	if err != nil {
		t.Fatalf("heartbeat rejected: %v: %s", err, b)
	}
	if f.Heartbeat.Checkpoint != nil || f.Heartbeat.UploadedBytes != 10 {
		t.Errorf("heartbeat = %s, want no checkpoint and the uploaded bytes", b)
	}
}
