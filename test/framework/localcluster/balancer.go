package localcluster

import (
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// balancer stands in for a Service in front of the control plane's
// replicas for what runs in the host's network namespace (the tests' own
// clients; the kwok pods' sidecars when the cluster has no network): a
// loopback TCP proxy that sends each new connection to a ready
// backend, as kube-proxy does with a Service's ready endpoints. A backend
// leaves the set when it stops being ready or starts terminating (the
// endpoints controller's view); established connections stay with it.
type balancer struct {
	ln       net.Listener
	mu       sync.Mutex
	backends []string // ready endpoints
	next     atomic.Uint64
	wg       sync.WaitGroup
	// blackhole, while set, holds every byte in both directions, on
	// established and new connections alike: the peers see a network that
	// accepts and never delivers (a partition, not a refusal).
	blackhole atomic.Bool
	// preferred, when set and ready, takes every new connection (a test
	// that needs to know which replica holds a session).
	preferred atomic.Pointer[string]
}

// prefer sends every new connection to backend addr while it is ready ("":
// spread them again).
func (b *balancer) prefer(addr string) {
	if addr == "" {
		b.preferred.Store(nil)
		return
	}
	b.preferred.Store(&addr)
}

// setBlackhole starts or ends the black hole.
func (b *balancer) setBlackhole(on bool) { b.blackhole.Store(on) }

func newBalancer() (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// Addr is the "Service" address.
func (b *balancer) Addr() string { return b.ln.Addr().String() }

// setReady adds or removes a backend.
func (b *balancer) setReady(addr string, ready bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, a := range b.backends {
		if a == addr {
			if !ready {
				b.backends = append(b.backends[:i], b.backends[i+1:]...)
			}
			return
		}
	}
	if ready {
		b.backends = append(b.backends, addr)
	}
}

func (b *balancer) ready() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.backends...)
}

// copy is io.Copy that holds what it read while the black hole lasts.
func (b *balancer) copy(dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		for b.blackhole.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if err != nil {
			if err == io.EOF {
				return n, nil
			}
			return n, err
		}
	}
}

func (b *balancer) close() {
	_ = b.ln.Close()
	b.wg.Wait()
}

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		conn, err := b.ln.Accept()
		if err != nil {
			return
		}
		go b.proxy(conn)
	}
}

func (b *balancer) proxy(client net.Conn) {
	defer client.Close()
	backends := b.ready()
	if len(backends) == 0 {
		return // no ready endpoint: the connection is refused, as with an empty Service
	}
	if p := b.preferred.Load(); p != nil && slices.Contains(backends, *p) {
		backends = []string{*p}
	}
	start := int(b.next.Add(1))
	var upstream net.Conn
	for i := range backends {
		c, err := net.Dial("tcp", backends[(start+i)%len(backends)])
		if err == nil {
			upstream = c
			break
		}
	}
	if upstream == nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = b.copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
	<-done
	<-done
}
