package store

import (
	"context"
	"time"
)

// ReadyWait is how long WaitReady waits for Options.Ready.
const ReadyWait = 5 * time.Second

// WaitReady reports whether the backend may be used, after waiting at most
// ReadyWait (or until ctx ends): a replica that starts serves its sessions
// at once, and its first uploads wait out the store's probe.
func (s *Store) WaitReady(ctx context.Context) bool {
	ready := s.opts.Ready
	if ready == nil {
		return true
	}
	select {
	case <-ready:
		return true
	default:
	}
	t := time.NewTimer(ReadyWait)
	defer t.Stop()
	select {
	case <-ready:
		return true
	case <-ctx.Done():
		return false
	case <-t.C:
		return false
	}
}
