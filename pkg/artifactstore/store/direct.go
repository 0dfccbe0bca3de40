package store

import (
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
)

// DefaultDirectTTL is how long a presigned PUT URL lives. The backend checks
// it when the request arrives, so it bounds the wait before the PUT, not the
// upload's duration.
const DefaultDirectTTL = 5 * time.Minute

// DirectOptions configure direct uploads (docs/artifacts.md): the zero value
// allows them whenever the backend is a PutPresigner.
type DirectOptions struct {
	// Disabled forces proxy mode: every authorize answers ModeProxy.
	Disabled bool
	// TTL is the presigned URL's lifetime (default DefaultDirectTTL).
	TTL time.Duration
}

// Presigner is what presigns direct uploads now, or nil when bodies go
// through the server: the backend cannot presign, direct uploads are
// disabled, or the backend's start-up probe found presigned PUTs it cannot
// verify.
func (s *Store) Presigner() objects.PutPresigner {
	p, ok := s.backend.(objects.PutPresigner)
	if !ok || s.opts.Direct.Disabled {
		return nil
	}
	if d, ok := s.backend.(interface{ DirectUploads() bool }); ok && !d.DirectUploads() {
		return nil
	}
	return p
}

// DirectTTL is the lifetime of the direct-upload URLs the store presigns,
// or 0 when the backend cannot presign (nothing to sweep). It does not look
// at Direct.Disabled: URLs presigned before a restart that disabled direct
// uploads still live out their TTL.
func (s *Store) DirectTTL() time.Duration {
	if _, ok := s.backend.(objects.PutPresigner); !ok {
		return 0
	}
	if s.opts.Direct.TTL > 0 {
		return s.opts.Direct.TTL
	}
	return DefaultDirectTTL
}
