package localcluster

// A replica's readiness, as the endpoints controller and the kubelet see
// it: the /readyz poll that puts replicas behind the Services or takes
// them out, and the waits for a replica (re)started to be ready.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// setReady puts replica r behind the Service and the forwarders (ready) or
// takes it out; pollReadiness calls it every 200ms.
func (t *Tether) setReady(r *Replica, ready bool) {
	t.mu.Lock()
	r.ready = ready
	terminating := r.terminating
	t.mu.Unlock()
	if t.webhookLB != nil {
		t.webhookLB.setReady(r.WebhookAddr, ready)
	}
	t.bindingLB.setReady(r.BindingAddr, ready)
	if t.endpoints != nil {
		t.endpoints.set(r.Index, ready, terminating)
		t.syncEndpoints()
	}
}

// syncEndpoints writes the EndpointSlices that changed (a failed write is
// retried on the next poll).
func (t *Tether) syncEndpoints() {
	if err := t.endpoints.sync(context.Background()); err != nil {
		t.c.logf("tether endpoints: %v", err)
	}
}

// StartReplicaAgain starts a replica stopped by KillReplica and waits until
// it is ready. A new process that exits on its own (started into an API
// server restart, say) is started again after the kubelet's back-off
// (restartOnExit), as its pod would be: waited for too.
func (t *Tether) StartReplicaAgain(ctx context.Context, i int) error {
	r := t.replicas[i]
	t.c.untrack(r.proc)
	if err := t.startReplica(r); err != nil {
		return err
	}
	return t.c.waitFor(ctx, 60*time.Second+2*crashRestartDelay, fmt.Sprintf("tether replica %d ready again (log %s)", r.Index, r.proc.LogFile), func() (bool, error) {
		t.mu.Lock()
		ready := r.ready && !r.terminating
		t.mu.Unlock()
		return ready && (t.endpoints == nil || t.endpoints.isWritten(r.Index)), nil
	})
}

// AwaitReplicasReady waits until every replica is running, ready and not
// terminating: one that exited on its own (a replica SIGCONTed past its
// Lease exits at once, as controller-runtime does on a lost election) is
// started again after the kubelet's back-off (restartOnExit), and is waited
// for too.
func (t *Tether) AwaitReplicasReady(ctx context.Context) error {
	for _, r := range t.Replicas() {
		err := t.c.waitFor(ctx, 60*time.Second+2*crashRestartDelay, fmt.Sprintf("tether replica %d ready", r.Index), func() (bool, error) {
			t.mu.Lock()
			proc, ready := r.proc, r.ready && !r.terminating
			t.mu.Unlock()
			if exited, _ := proc.Exited(); exited {
				return false, nil // restartOnExit starts it again
			}
			return ready && (t.endpoints == nil || t.endpoints.isWritten(r.Index)), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *Tether) waitReady(ctx context.Context, r *Replica, timeout time.Duration) error {
	return t.c.waitFor(ctx, timeout, fmt.Sprintf("tether replica %d ready (log %s)", r.Index, r.proc.LogFile), func() (bool, error) {
		if exited, err := r.proc.Exited(); exited {
			return false, fmt.Errorf("tether replica %d exited (%v); see %s", r.Index, err, r.proc.LogFile)
		}
		t.mu.Lock()
		ready := r.ready
		t.mu.Unlock()
		// On the network, ready once its EndpointSlices say so.
		return ready && (t.endpoints == nil || t.endpoints.isWritten(r.Index)), nil
	})
}

// pollReadiness is the endpoints controller: every 200ms each replica's
// /readyz decides whether it is behind the Services.
func (t *Tether) pollReadiness() {
	defer close(t.pollDone)
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, r := range t.Replicas() {
			t.mu.Lock()
			terminating := r.terminating
			t.mu.Unlock()
			ready := false
			if !terminating {
				if resp, err := hc.Get("http://" + r.HealthAddr + "/readyz"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					ready = resp.StatusCode == http.StatusOK
				}
			}
			t.setReady(r, ready)
		}
		select {
		case <-t.stopPoll:
			return
		case <-tick.C:
		}
	}
}
