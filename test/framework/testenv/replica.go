package testenv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-dev/tether/pkg/controlplane"
)

// Replica is a second control plane of the same environment, as a second
// pod of the Deployment would be: same credentials, certificate, artifact
// store and lease, its own webhook, binding and metrics ports.
type Replica struct {
	BindingURL string
	stop       func() error
}

// Stop stops the replica.
func (r *Replica) Stop() error { return r.stop() }

// StartReplica starts another control plane next to the first one (which
// Start or StartControlPlane started) and waits until it serves; mods change
// its options after the environment's.
func (e *Env) StartReplica(ctx context.Context, mods ...func(*controlplane.Options)) (*Replica, error) {
	if e.cpConfig == nil {
		return nil, errors.New("start the first control plane before a replica")
	}
	bindingAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	webhookAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	var port int
	if _, err := fmt.Sscanf(webhookAddr[len("127.0.0.1:"):], "%d", &port); err != nil {
		return nil, err
	}
	opts := e.controlPlaneOptions(e.cpOpts)
	opts.WebhookPort = port
	opts.BindingAddr = bindingAddr
	opts.MetricsAddr = "0"
	for _, m := range mods {
		m(&opts)
	}
	cp, err := controlplane.New(e.cpConfig, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cp.Start(ctx) }()
	r := &Replica{BindingURL: "https://" + bindingAddr, stop: func() error {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}}
	deadline := time.Now().Add(30 * time.Second)
	for cp.Ready() != nil {
		if time.Now().After(deadline) {
			_ = r.Stop()
			return nil, fmt.Errorf("replica not ready within 30s: %w", cp.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !cp.GetCache().WaitForCacheSync(ctx) {
		_ = r.Stop()
		return nil, errors.New("replica caches did not sync")
	}
	return r, nil
}
