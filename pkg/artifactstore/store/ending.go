package store

import (
	"context"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
)

// What the controllers ask of the store when a binding's outcome is known
// (pkg/artifactstore/pending). Promotion takes the same key locks as the
// endpoint's PUTs and commits: a PUT that chose its target before a
// promotion of its key began finishes first.

// pending is the store's pending objects, under the store's key locks.
func (s *Store) pending() *pending.Store {
	return &pending.Store{Backend: s.backend, Locks: &s.locks, Log: s.opts.Log}
}

// Promote puts in place exactly what the verified manifests list and drops
// every other pending object of job jobID (pending.Store.Promote).
func (s *Store) Promote(ctx context.Context, jobID string, manifests []pending.VerifiedManifest) (int, error) {
	return s.pending().Promote(ctx, jobID, manifests)
}

// VerifiedPaths are the paths job jobID's verified manifests list
// (pending.Store.VerifiedPaths).
func (s *Store) VerifiedPaths(ctx context.Context, jobID string, manifests []pending.VerifiedManifest) ([]string, error) {
	return s.pending().VerifiedPaths(ctx, jobID, manifests)
}

// DropPending deletes every pending object of job jobID
// (pending.Store.DropPending).
func (s *Store) DropPending(ctx context.Context, jobID string) (int, error) {
	return s.pending().DropPending(ctx, jobID)
}

// SweepUploads deletes up to limit of job jobID's direct uploads and
// aborts its open multipart uploads (pending.Store.SweepUploads).
func (s *Store) SweepUploads(ctx context.Context, jobID string, limit int) (int, bool, error) {
	return s.pending().SweepUploads(ctx, jobID, limit)
}

// UploadJobs calls fn with every job id that has direct uploads or
// multipart state records (pending.Store.UploadJobs).
func (s *Store) UploadJobs(ctx context.Context, fn func(jobID string) error) error {
	return s.pending().UploadJobs(ctx, fn)
}

// StoresInParts says whether the backend takes multipart uploads: then
// the sweep has uploads to abort even where it has no presigned URL to
// wait out.
func (s *Store) StoresInParts() bool {
	_, ok := s.backend.(objects.Multiparter)
	return ok
}

// AbortUnownedUploads aborts the open multipart uploads of job ids owned
// says no live binding holds (pending.Store.AbortUnownedUploads).
func (s *Store) AbortUnownedUploads(ctx context.Context, owned func(jobID string) (bool, error)) (int, error) {
	return s.pending().AbortUnownedUploads(ctx, owned)
}
