package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/upload"
)

// Sweeping a job's pending uploads (upload.UploadsPrefix/<job-id>/) once its
// binding has ended: a presigned URL stays valid for its TTL whatever the
// binding does, so bytes can land there after the binding's own cleanup.
// The controller decides when (pkg/controller, uploadsweep.go); these do
// the store's part, a bounded amount of work per call.

// UploadSweepPage bounds one sweep call: at most this many keys are listed
// and deleted (one LIST page of S3's); the caller comes back for the rest.
const UploadSweepPage = 1000

// PageLister is a backend that lists at most n keys under prefix, in key
// order, and says whether more follow (the S3 backend: one LIST page).
// Without it a sweep lists everything and deletes the first n.
type PageLister interface {
	ListPage(ctx context.Context, prefix string, n int) (keys []string, more bool, err error)
}

// DirLister is a backend that lists the names one level under prefix
// (S3's delimiter listing), calling fn with each; fn's error stops it.
// Without it, the job ids under upload.UploadsPrefix come from a full list.
type DirLister interface {
	ListDirs(ctx context.Context, prefix string, fn func(name string) error) error
}

// DirectTTL is the lifetime of the direct-upload URLs the handler presigns,
// or 0 when the backend cannot presign (nothing to sweep). It does not look
// at Direct.Disabled: URLs presigned before a restart that disabled direct
// uploads still live out their TTL.
func (h *Handler) DirectTTL() time.Duration {
	if _, ok := h.Backend.(PutPresigner); !ok {
		return 0
	}
	if h.Direct.TTL > 0 {
		return h.Direct.TTL
	}
	return DefaultDirectTTL
}

// SweepUploads deletes up to limit objects under job jobID's pending-upload
// prefix (uploads never committed, bytes a URL wrote after its binding
// ended, commit markers) and returns how many it deleted and whether more
// remain. Call it only once no live binding can commit for jobID (the
// binding is Succeeded, Failed or gone): a commit needs the upload's object.
func (h *Handler) SweepUploads(ctx context.Context, jobID string, limit int) (int, bool, error) {
	if err := checkJobID(jobID); err != nil {
		return 0, false, err
	}
	if limit <= 0 {
		limit = UploadSweepPage
	}
	prefix := uploadsPrefix(jobID)
	var keys []string
	var more bool
	var err error
	if p, ok := h.Backend.(PageLister); ok {
		keys, more, err = p.ListPage(ctx, prefix, limit)
	} else if keys, err = h.Backend.List(ctx, prefix); len(keys) > limit {
		keys, more = keys[:limit], true
	}
	if err != nil {
		return 0, false, fmt.Errorf("listing direct uploads of job %s: %w", jobID, err)
	}
	n := 0
	for _, k := range keys {
		if err := h.Backend.Delete(ctx, k); err != nil {
			return n, true, fmt.Errorf("deleting direct upload %s: %w", k, err)
		}
		n++
	}
	return n, more, nil
}

// UploadJobs calls fn with the id of every job that has objects under
// upload.UploadsPrefix: after a restart, the only trace of a job whose
// binding was deleted meanwhile. fn's error stops the listing.
func (h *Handler) UploadJobs(ctx context.Context, fn func(jobID string) error) error {
	if d, ok := h.Backend.(DirLister); ok {
		return d.ListDirs(ctx, upload.UploadsPrefix, func(name string) error {
			if checkJobID(name) != nil {
				return nil
			}
			return fn(name)
		})
	}
	keys, err := h.Backend.List(ctx, upload.UploadsPrefix)
	if err != nil {
		return fmt.Errorf("listing direct uploads: %w", err)
	}
	last := ""
	for _, k := range keys {
		job, _, ok := strings.Cut(strings.TrimPrefix(k, upload.UploadsPrefix), "/")
		if !ok || job == last || checkJobID(job) != nil {
			continue
		}
		last = job
		if err := fn(job); err != nil {
			return err
		}
	}
	return nil
}

var (
	_ PageLister = (*S3Backend)(nil)
	_ DirLister  = (*S3Backend)(nil)
)

// ListPage lists at most n keys under prefix: one LIST request of n keys
// (S3 answers at most 1,000 a page), and a second one only to say whether
// more follow when the page was full.
func (b *S3Backend) ListPage(ctx context.Context, prefix string, n int) ([]string, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine
	var keys []string
	for oi := range b.Client.ListObjects(ctx, b.Bucket, minio.ListObjectsOptions{Prefix: b.name(prefix), Recursive: true, MaxKeys: n}) {
		if oi.Err != nil {
			return nil, false, fmt.Errorf("S3 LIST %s: %w", b.name(prefix), oi.Err)
		}
		if len(keys) == n {
			return keys, true, nil
		}
		keys = append(keys, strings.TrimPrefix(oi.Key, b.Prefix))
	}
	return keys, false, nil
}

// ListDirs calls fn with each name one level under prefix that holds
// objects (S3's common prefixes, delimiter "/"), page by page.
func (b *S3Backend) ListDirs(ctx context.Context, prefix string, fn func(name string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := b.name(prefix)
	for oi := range b.Client.ListObjects(ctx, b.Bucket, minio.ListObjectsOptions{Prefix: full}) {
		if oi.Err != nil {
			return fmt.Errorf("S3 LIST %s (delimiter /): %w", full, oi.Err)
		}
		name, isDir := strings.CutSuffix(strings.TrimPrefix(oi.Key, full), "/")
		if !isDir || name == "" {
			continue
		}
		if err := fn(name); err != nil {
			return err
		}
	}
	return nil
}
