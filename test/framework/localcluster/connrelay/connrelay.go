package connrelay

import (
	"io"
	"net"
	"sync"
)

// Relay accepts connections on a listener and pipes each to a new
// connection from its dialer.
type Relay struct {
	ln    net.Listener
	dial  func() (net.Conn, error)
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// Start relays ln's connections to dial's until Close.
func Start(ln net.Listener, dial func() (net.Conn, error)) *Relay {
	r := &Relay{ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r
}

func (r *Relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go r.pipe(c)
	}
}

func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *Relay) pipe(a net.Conn) {
	defer r.wg.Done()
	defer a.Close()
	b, err := r.dial()
	if err != nil {
		return
	}
	defer b.Close()
	if !r.track(a, b) {
		return
	}
	defer func() {
		r.mu.Lock()
		delete(r.conns, a)
		delete(r.conns, b)
		r.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
}

// Close stops accepting, closes every relayed connection and waits for
// their goroutines.
func (r *Relay) Close() {
	r.mu.Lock()
	r.done = true
	_ = r.ln.Close()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
