package store

import (
	"context"

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

// DropPending deletes every pending object of job jobID
// (pending.Store.DropPending).
func (s *Store) DropPending(ctx context.Context, jobID string) (int, error) {
	return s.pending().DropPending(ctx, jobID)
}

// SweepUploads deletes up to limit of job jobID's direct uploads
// (pending.Store.SweepUploads).
func (s *Store) SweepUploads(ctx context.Context, jobID string, limit int) (int, bool, error) {
	return s.pending().SweepUploads(ctx, jobID, limit)
}

// UploadJobs calls fn with every job id that has direct uploads
// (pending.Store.UploadJobs).
func (s *Store) UploadJobs(ctx context.Context, fn func(jobID string) error) error {
	return s.pending().UploadJobs(ctx, fn)
}
