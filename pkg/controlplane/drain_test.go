package controlplane

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Told to stop, a replica fails readiness at once and keeps running (its
// servers open) until the delay passes.
func TestDrainFailsReadinessThenStops(t *testing.T) {
	d := &drain{delay: time.Hour}
	stop, signal := context.WithCancel(context.Background())
	ctx, cancel := d.run(stop)
	defer cancel()
	if err := d.ready(); err != nil {
		t.Fatalf("ready before the signal: %v", err)
	}
	signal()
	for d.ready() == nil {
		time.Sleep(time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatal("the replica stopped at the signal; it must keep serving for --shutdown-delay")
	}
	cancel()
	<-ctx.Done()

	// No delay: it stops with the signal.
	d = &drain{}
	stop, signal = context.WithCancel(context.Background())
	ctx, cancel = d.run(stop)
	defer cancel()
	signal()
	<-ctx.Done()
	if d.ready() == nil {
		t.Error("a stopped replica reports ready")
	}
}

func TestShutdownDelayValidated(t *testing.T) {
	o := DefaultOptions()
	o.ServerURL = "https://tether-control-plane.tether-system.svc:8443"
	if err := o.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	o.ShutdownDelay = 2 * time.Minute
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--shutdown-delay=2m0s") {
		t.Errorf("--shutdown-delay=2m: %v; want it refused, named", err)
	}
}
