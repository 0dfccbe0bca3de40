package pending

import (
	"context"
	"fmt"
	"strings"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// Sweeping a job's pending uploads (upload.UploadsPrefix/<job-id>/) once its
// binding has ended: a presigned URL stays valid for its TTL whatever the
// binding does, so bytes can land there after the binding's own cleanup.
// The controller decides when (pkg/controller/uploadsweep); these do
// the store's part, a bounded amount of work per call.

// UploadSweepPage bounds one sweep call: at most this many keys are listed
// and deleted (one LIST page of S3's); the caller comes back for the rest.
const UploadSweepPage = 1000

// SweepUploads deletes up to limit objects under job jobID's pending-upload
// prefix (uploads never committed, bytes a URL wrote after its binding
// ended, commit markers) and returns how many it deleted and whether more
// remain. Call it only once no live binding can commit for jobID (the
// binding is Succeeded, Failed or gone): a commit needs the upload's object.
func (s *Store) SweepUploads(ctx context.Context, jobID string, limit int) (int, bool, error) {
	if err := objects.CheckJobID(jobID); err != nil {
		return 0, false, err
	}
	if limit <= 0 {
		limit = UploadSweepPage
	}
	prefix := objects.JobUploadsPrefix(jobID)
	var keys []string
	var more bool
	var err error
	if p, ok := s.Backend.(objects.PageLister); ok {
		keys, more, err = p.ListPage(ctx, prefix, limit)
	} else if keys, err = s.Backend.List(ctx, prefix); len(keys) > limit {
		keys, more = keys[:limit], true
	}
	if err != nil {
		return 0, false, fmt.Errorf("listing direct uploads of job %s: %w", jobID, err)
	}
	n := 0
	for _, k := range keys {
		if err := s.Backend.Delete(ctx, k); err != nil {
			return n, true, fmt.Errorf("deleting direct upload %s: %w", k, err)
		}
		n++
	}
	return n, more, nil
}

// UploadJobs calls fn with the id of every job that has objects under
// upload.UploadsPrefix: after a restart, the only trace of a job whose
// binding was deleted meanwhile. fn's error stops the listing.
func (s *Store) UploadJobs(ctx context.Context, fn func(jobID string) error) error {
	if d, ok := s.Backend.(objects.DirLister); ok {
		return d.ListDirs(ctx, upload.UploadsPrefix, func(name string) error {
			if objects.CheckJobID(name) != nil {
				return nil
			}
			return fn(name)
		})
	}
	keys, err := s.Backend.List(ctx, upload.UploadsPrefix)
	if err != nil {
		return fmt.Errorf("listing direct uploads: %w", err)
	}
	last := ""
	for _, k := range keys {
		job, _, ok := strings.Cut(strings.TrimPrefix(k, upload.UploadsPrefix), "/")
		if !ok || job == last || objects.CheckJobID(job) != nil {
			continue
		}
		last = job
		if err := fn(job); err != nil {
			return err
		}
	}
	return nil
}

// dropUploads deletes the direct uploads of job jobID that were never
// committed (the binding ended while they were in flight), one sweep page:
// what a URL writes later, and any rest, is the controller's sweep's
// (SweepUploads).
func (s *Store) dropUploads(ctx context.Context, jobID string) error {
	_, _, err := s.SweepUploads(ctx, jobID, UploadSweepPage)
	return err
}
