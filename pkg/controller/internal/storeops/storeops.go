package storeops

import (
	"context"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
)

// PendingArtifacts is the store's handling of deferred overwrites: promoted
// before a binding says Succeeded, dropped once it is final or its TrainJob
// is gone.
type PendingArtifacts interface {
	Promote(ctx context.Context, jobID string, manifests []pending.VerifiedManifest) (int, error)
	DropPending(ctx context.Context, jobID string) (int, error)
}

// VerifiedPaths reads what verified manifests list, for the
// required-outputs check.
type VerifiedPaths interface {
	VerifiedPaths(ctx context.Context, jobID string, manifests []pending.VerifiedManifest) ([]string, error)
}

// StoredManifests checks a node's manifest as the store holds it.
type StoredManifests interface {
	StoredManifest(ctx context.Context, jobID string, rank int) (verify.ManifestResult, bool, error)
}

// DirectUploads is the store's part of the sweep of what uploads leave:
// direct uploads' objects and open multipart uploads.
type DirectUploads interface {
	// DirectTTL is the presigned URLs' lifetime, 0 if the store presigns none.
	DirectTTL() time.Duration
	// StoresInParts says whether the store takes multipart uploads.
	StoresInParts() bool
	SweepUploads(ctx context.Context, jobID string, limit int) (int, bool, error)
	UploadJobs(ctx context.Context, fn func(jobID string) error) error
	AbortUnownedUploads(ctx context.Context, owned func(jobID string) (bool, error)) (int, error)
}
