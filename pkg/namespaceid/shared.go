package namespaceid

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sharedReadTimeout bounds one shared read: it answers callers whose own
// contexts it cannot follow.
const sharedReadTimeout = 30 * time.Second

// Shared reads namespaces live, as Get does, with one read for every caller
// waiting on the same name. A read that starts after a caller asked answers
// that caller as well as a read of its own would (what it says was true
// after the caller asked), so a caller never joins a read already under
// way: it waits for the next one, which starts as soon as that read ends
// and answers everyone who asked meanwhile. In a burst of bindings in one
// namespace the API server is read once per round of the controller's
// workers instead of once per binding, and no answer is older than the
// question.
type Shared struct {
	// Live is the API server.
	Live client.Reader

	mu    sync.Mutex
	names map[string]*nameReads // only names with a read under way or due
}

// nameReads is one name's reads: whether one is under way, and the callers
// waiting for the next.
type nameReads struct {
	reading bool
	next    *sharedRead
}

// sharedRead is one read and what it found.
type sharedRead struct {
	done chan struct{}
	id   Identity
	err  error
}

// Get returns namespace name's identity, read from the API server after
// the call began; errors as Get's.
func (s *Shared) Get(ctx context.Context, name string) (Identity, error) {
	s.mu.Lock()
	if s.names == nil {
		s.names = map[string]*nameReads{}
	}
	n := s.names[name]
	if n == nil {
		n = &nameReads{}
		s.names[name] = n
	}
	if n.next == nil {
		n.next = &sharedRead{done: make(chan struct{})}
	}
	read := n.next
	if !n.reading {
		s.start(name, n)
	}
	s.mu.Unlock()
	select {
	case <-read.done:
		return read.id, read.err
	case <-ctx.Done():
		return Identity{}, ctx.Err()
	}
}

// start reads for the callers waiting on name; s.mu is held.
func (s *Shared) start(name string, n *nameReads) {
	read := n.next
	n.next, n.reading = nil, true
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), sharedReadTimeout)
		read.id, read.err = Get(ctx, s.Live, name)
		cancel()
		close(read.done)
		s.mu.Lock()
		defer s.mu.Unlock()
		n.reading = false
		if n.next != nil {
			s.start(name, n)
			return
		}
		delete(s.names, name)
	}()
}
