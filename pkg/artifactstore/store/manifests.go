package store

import (
	"context"

	"github.com/tether-dev/tether/pkg/artifactstore/verify"
)

// CheckManifest checks the entries of node rank's manifest, stored under
// key and scanned from buf, against the backend (verify.ScannedManifest):
// the endpoint's check of a manifest PUT.
func (s *Store) CheckManifest(ctx context.Context, key string, rank int, scanned *verify.Scanned, buf []byte) (verify.ManifestResult, error) {
	return verify.ScannedManifest(ctx, s.backend, key, rank, scanned, buf, s.manifestWorkers())
}

// StoredManifest checks node rank's manifest as the store holds it, for a
// verdict that was never recorded (verify.Stored).
func (s *Store) StoredManifest(ctx context.Context, jobID string, rank int) (verify.ManifestResult, bool, error) {
	return verify.Stored(ctx, s.backend, jobID, rank, s.manifestWorkers())
}
