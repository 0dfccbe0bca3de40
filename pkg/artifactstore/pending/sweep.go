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
// The same sweep aborts the job's open multipart uploads (multipart.go).
// The controller decides when (pkg/controller/uploadsweep); these do
// the store's part, a bounded amount of work per call.

// UploadSweepPage bounds one sweep call: at most this many keys are listed
// and deleted (one LIST page of S3's), multipart uploads aborted included;
// the caller comes back for the rest.
const UploadSweepPage = 1000

// SweepUploads deletes up to limit objects under job jobID's pending-upload
// prefix (uploads never committed, bytes a URL wrote after its binding
// ended, commit markers, multipart state records) and aborts the job's
// open multipart uploads: each state record's upload before the record is
// deleted, then, once the prefix is empty, every upload the store lists
// under the job's own prefix (one whose record was never written). Objects
// deleted and uploads aborted are at most limit together; it returns how
// many and whether more remain. Call it only once no live binding can
// commit or store parts for jobID (the binding is Succeeded, Failed or
// gone): a commit needs the upload's object.
func (s *Store) SweepUploads(ctx context.Context, jobID string, limit int) (int, bool, error) {
	if err := objects.CheckJobID(jobID); err != nil {
		return 0, false, err
	}
	if limit <= 0 {
		limit = UploadSweepPage
	}
	keys, more, err := s.listUploads(ctx, jobID, limit)
	if err != nil {
		return 0, false, fmt.Errorf("listing direct uploads of job %s: %w", jobID, err)
	}
	m, states := multipartOf(s.Backend), objects.MultipartStatePrefix(jobID)
	n := 0
	for _, k := range keys {
		if m != nil && strings.HasPrefix(k, states) {
			if err := s.abortRecorded(ctx, m, jobID, k); err != nil {
				return n, true, err
			}
		}
		if err := s.Backend.Delete(ctx, k); err != nil {
			return n, true, fmt.Errorf("deleting direct upload %s: %w", k, err)
		}
		n++
	}
	if more {
		return n, true, nil
	}
	aborted, more, err := s.abortOpenUploads(ctx, jobID, limit-n)
	return n + aborted, more, err
}

// listUploads lists up to limit keys under job jobID's pending-upload
// prefix, in key order, and says whether more follow.
func (s *Store) listUploads(ctx context.Context, jobID string, limit int) ([]string, bool, error) {
	prefix := objects.JobUploadsPrefix(jobID)
	if p, ok := s.Backend.(objects.PageLister); ok {
		return p.ListPage(ctx, prefix, limit)
	}
	keys, err := s.Backend.List(ctx, prefix)
	if len(keys) > limit {
		return keys[:limit], true, err
	}
	return keys, false, err
}

// UploadJobs calls fn with the id of every job that has objects under
// upload.UploadsPrefix (direct uploads, commit markers, multipart state
// records): after a restart, the only trace of a job whose binding was
// deleted meanwhile. fn's error stops the listing.
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
// committed (the binding ended while they were in flight) and aborts its
// open multipart uploads, one sweep page: what a URL writes or a lagging
// replica starts later, and any rest, is the controller's sweep's
// (SweepUploads).
func (s *Store) dropUploads(ctx context.Context, jobID string) error {
	_, _, err := s.SweepUploads(ctx, jobID, UploadSweepPage)
	return err
}
