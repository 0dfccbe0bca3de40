package endpoint

import (
	"context"

	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
)

// What the controller asks of the store when a binding's outcome is known
// (pkg/artifactstore/pending, pkg/artifactstore/verify). The Handler is what
// the binding server hands the controller: promotion must take the same
// per-key locks as the Handler's PUTs and commits, so it runs through the
// Handler that holds them.

// pending is the Handler's pending objects, under the Handler's key locks.
func (h *Handler) pending() *pending.Store {
	return &pending.Store{Backend: h.Backend, Locks: &h.locks, Log: h.Log}
}

// Promote puts in place exactly what the verified manifests list and drops
// every other pending object of job jobID (pending.Store.Promote).
func (h *Handler) Promote(ctx context.Context, jobID string, manifests []pending.VerifiedManifest) (int, error) {
	return h.pending().Promote(ctx, jobID, manifests)
}

// DropPending deletes every pending object of job jobID
// (pending.Store.DropPending).
func (h *Handler) DropPending(ctx context.Context, jobID string) (int, error) {
	return h.pending().DropPending(ctx, jobID)
}

// SweepUploads deletes up to limit of job jobID's direct uploads
// (pending.Store.SweepUploads).
func (h *Handler) SweepUploads(ctx context.Context, jobID string, limit int) (int, bool, error) {
	return h.pending().SweepUploads(ctx, jobID, limit)
}

// UploadJobs calls fn with every job id that has direct uploads
// (pending.Store.UploadJobs).
func (h *Handler) UploadJobs(ctx context.Context, fn func(jobID string) error) error {
	return h.pending().UploadJobs(ctx, fn)
}

// StoredManifest checks node rank's manifest as the store holds it, for a
// verdict that was never recorded (verify.Stored).
func (h *Handler) StoredManifest(ctx context.Context, jobID string, rank int) (verify.ManifestResult, bool, error) {
	return verify.Stored(ctx, h.Backend, jobID, rank, h.manifestWorkers())
}
