package store

import (
	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// Options configure a Store beyond its backend.
type Options struct {
	// Direct configures direct uploads (direct.go): bodies PUT straight to
	// a backend that can presign, then committed through the endpoint.
	Direct DirectOptions
	// Multipart configures how large bodies are stored in parts
	// (multipart.go).
	Multipart MultipartOptions
	// Ready, if set, is closed once the backend may be used (an S3 store's
	// start-up probe chose how: s3store.S3Backend.Probed). WaitReady waits
	// for it.
	Ready <-chan struct{}
	// OnAccess, if set, is the access log: called once for every request
	// to the artifact endpoint, after its answer (AccessRecord).
	OnAccess func(AccessRecord)
	// ManifestWorkers bounds the backend HEADs in flight while a manifest is
	// checked (default 8).
	ManifestWorkers int
	// Log gets the store's own lines (promotions, drops).
	Log logr.Logger
}

// Store is a replica's artifact store: build it once with New and hand the
// same Store to everything that reads or writes the store's objects.
// It is safe for concurrent use.
type Store struct {
	backend upload.Backend
	opts    Options
	// locks orders a key's HEADs, PUT and promotion (objects.KeyLocks).
	locks objects.KeyLocks
}

// New returns the Store of backend.
func New(backend upload.Backend, opts Options) *Store {
	return &Store{backend: backend, opts: opts}
}

// Backend is the store's backend.
func (s *Store) Backend() upload.Backend { return s.backend }

// Lock takes key's lock and returns what releases it: a PUT or commit holds
// it from the HEADs that choose where the body goes until the object is
// verified (or removed), and promotion while it moves a pending object over
// the key.
func (s *Store) Lock(key string) (unlock func()) { return s.locks.Lock(key) }

func (s *Store) manifestWorkers() int {
	if s.opts.ManifestWorkers > 0 {
		return s.opts.ManifestWorkers
	}
	return 8
}
