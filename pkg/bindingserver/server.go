package bindingserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/gorilla/websocket"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/replicalease"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// Options configure a Server.
type Options struct {
	// Addr is the listen address, e.g. ":8443".
	Addr string
	// CertDir holds tls.crt and tls.key (watched and reloaded on rotation).
	CertDir string
	// TLSConfig overrides CertDir (tests, benchmarks).
	TLSConfig *tls.Config
	// StatusInterval is the minimum time between two status writes of one
	// binding for reported data that changed (progress, uploaded bytes),
	// and for liveness alone when the replica has no Lease. Transitions
	// are written at once.
	StatusInterval time.Duration
	// LivenessWriteInterval is the minimum time between two liveness-only
	// status writes of one binding while the replica's Lease vouches for
	// its sessions.
	LivenessWriteInterval time.Duration
	// StatusWriteRate bounds the paced status writes (reported data and
	// liveness, not transitions) per second while the Lease vouches.
	StatusWriteRate float64
	// Lease is the replica's Lease; zero runs without one.
	Lease replicalease.Options
	// MissedHeartbeats is how many intervals without a heartbeat mean the
	// heartbeat is lost.
	MissedHeartbeats int
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// PodTokens reviews the pod tokens (names.HeaderPodToken) that prove
	// which pod a request comes from (pkg/workerauth). Nil refuses every
	// register, session and artifact request with 503.
	PodTokens workerauth.PodTokenReviewer
}

func (o *Options) defaults() {
	if o.StatusInterval == 0 {
		o.StatusInterval = 30 * time.Second
	}
	if o.LivenessWriteInterval == 0 {
		o.LivenessWriteInterval = DefaultLivenessWriteInterval
	}
	if o.StatusWriteRate == 0 {
		o.StatusWriteRate = DefaultStatusWriteRate
	}
	if o.MissedHeartbeats == 0 {
		o.MissedHeartbeats = 3
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// DefaultLivenessWriteInterval and DefaultStatusWriteRate are the control
// plane's defaults: 10,000 quiet bindings cost at most 15 status writes a
// second, and a binding's liveness-only write comes every 10 minutes.
const (
	DefaultLivenessWriteInterval = 10 * time.Minute
	DefaultStatusWriteRate       = 15.0
)

// Server is the binding server. It implements manager.Runnable and runs on
// every replica.
type Server struct {
	opts Options
	// Cache reads WorkerBindings (indexed by workerauth.TokenHashIndex)
	// and trainer pods. The job's settings come from the binding, never the TrainJob.
	cache client.Reader
	// live reads from the API server when the cache may lag (a pod that was
	// just created, a conflict on write).
	live   client.Reader
	writer client.StatusClient
	log    logr.Logger
	events events.EventRecorder

	hub *hub
	// baseCtx is Serve's context: sessions run in it after their HTTP
	// handler returned.
	baseCtx  context.Context
	writes   workqueue.TypedRateLimitingInterface[types.NamespacedName]
	upgrader websocket.Upgrader
	metrics  *metrics
	handler  http.Handler
	// gate admits workers' requests: register, sessions and artifacts
	// (pkg/workerauth).
	gate *workerauth.Gate
	// skipped is what workers' scans skipped (skipped.go).
	skipped skippedReports
	// lease is the replica's Lease (nil without one); paced the bindings
	// waiting for a paced status write (pacing.go).
	lease *replicalease.Lease
	paced *pacedQueue
	// writeBudget is StatusWriteRate: the pacer waits for it, transitions
	// take from it without waiting.
	writeBudget *rate.Limiter
}

// New returns a Server. cache must have workerauth.TokenHashIndex on
// WorkerBindings.
// Events (may be nil) records the transitions it writes on the TrainJob.
func New(opts Options, cache, live client.Reader, writer client.StatusClient, log logr.Logger, events events.EventRecorder) *Server {
	opts.defaults()
	s := &Server{opts: opts, cache: cache, live: live, writer: writer, log: log, events: events, hub: newHub(),
		writes:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName]()),
		baseCtx: context.Background(),
		gate:    workerauth.New(workerauth.Options{Cache: cache, Live: live, Now: opts.Now, PodTokens: opts.PodTokens})}
	s.hub.onForget = func(k workerKey) { s.skipped.forget(k) }
	s.lease = replicalease.New(opts.Lease, opts.Now, log)
	s.paced = newPacedQueue()
	s.writeBudget = rate.NewLimiter(rate.Limit(opts.StatusWriteRate), 1)
	s.metrics = newMetrics(s.hub, opts.Now)
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		// A small read buffer of its own instead of the HTTP server's
		// 4 KiB one (a heartbeat is a few hundred bytes; bigger frames are
		// read through it); writes borrow a pooled buffer only while a frame
		// is written. Thousands of mostly idle sessions then hold 512 bytes
		// of buffers each (test/performance/binding measures it).
		ReadBufferSize:  512,
		WriteBufferPool: &sync.Pool{},
		// Sidecars are not browsers; there is no Origin to check.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+binding.PathRegister, s.handleRegister)
	mux.HandleFunc("GET "+binding.PathSession, s.handleSession)
	s.handler = mux
	return s
}

// Handler serves the binding protocol (tests mount it on their own listener).
func (s *Server) Handler() http.Handler { return s.handler }

// Mount serves h, on the binding server's listener, for the paths under
// prefix (the orchestrator read endpoint, pkg/artifactreads). Call it
// before Start.
func (s *Server) Mount(prefix string, h http.Handler) {
	next := s.handler
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, prefix) {
			h.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Refused counts a request refused by a handler mounted on the binding
// server (tether_binding_refusals_total, by reason).
func (s *Server) Refused(reason string) { s.metrics.refusals.WithLabelValues(reason).Inc() }

// Metrics returns the server's Prometheus collectors, for registration.
func (s *Server) Metrics() *metrics { return s.metrics }

// NeedLeaderElection is false: every replica serves sidecars.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then closes every session with GoingAway so
// sidecars reconnect to another replica.
func (s *Server) Start(ctx context.Context) error {
	tlsConfig := s.opts.TLSConfig
	if tlsConfig == nil {
		w, err := certwatcher.New(filepath.Join(s.opts.CertDir, "tls.crt"), filepath.Join(s.opts.CertDir, "tls.key"))
		if err != nil {
			return fmt.Errorf("binding server certificate: %w", err)
		}
		go func() { _ = w.Start(ctx) }()
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.GetCertificate}
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("binding server listen %s: %w", s.opts.Addr, err)
	}
	return s.Serve(ctx, tls.NewListener(ln, tlsConfig))
}

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// Registration bodies are small; sessions are hijacked and manage
		// their own deadlines.
		ReadTimeout:  30 * time.Second,
		WriteTimeout: 30 * time.Second,
		IdleTimeout:  120 * time.Second,
		ErrorLog:     nil,
	}
	s.baseCtx = ctx
	if s.lease != nil {
		go s.lease.Run(ctx)
	}
	go s.watchLiveness(ctx)
	go s.runStatusWriters(ctx)
	go s.runPacer(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("binding server listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.hub.closeAll(websocket.CloseGoingAway, "server shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
