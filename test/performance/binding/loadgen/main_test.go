package main

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// Sanity check, run by go test ./test/performance/binding/...: the
// generator's hand-built heartbeat is a valid frame.
func TestHeartbeatFrame(t *testing.T) {
	f, err := binding.DecodeFrame(appendHeartbeat(nil, 42, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != binding.FrameHeartbeat || f.Heartbeat.Seq != 42 || f.Heartbeat.Progress == nil || *f.Heartbeat.Progress.Step != 4200 {
		t.Fatalf("unexpected frame %+v", f)
	}
}
