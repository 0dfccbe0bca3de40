package pending

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// Aborting multipart uploads nobody will complete: S3 bills an incomplete
// upload's parts until it is aborted. The endpoint records each upload it
// starts (objects.MultipartState, under the job's upload prefix, so
// UploadJobs lists a job that has one); an upload it started but crashed
// before recording is found by listing the store's open uploads under the
// job's own prefix, where every upload's key lies (the client's key or its
// pending key).

// multipartOf is b's multipart uploads, or nil. Unlike
// objects.MultipartOf it does not ask whether the store can verify what it
// stores in parts: listing and aborting need no checksum, and an upload
// started while the store could must still be aborted.
func multipartOf(b upload.Backend) objects.Multiparter {
	m, _ := b.(objects.Multiparter)
	return m
}

// abortRecorded aborts the upload the state record at stateKey (of job
// jobID) names; the caller deletes the record after, so a failed abort
// keeps it for the next sweep. A record that is not JSON names nothing to
// abort: its upload, under the job's prefix, is aborted by
// abortOpenUploads.
func (s *Store) abortRecorded(ctx context.Context, m objects.Multiparter, jobID, stateKey string) error {
	st, err := objects.ReadMultipartState(ctx, s.Backend, stateKey)
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax) || errors.As(err, &typ):
		s.Log.Info("a multipart state record is not JSON: dropped, its upload is aborted with the job's unrecorded ones", "key", stateKey, "error", err.Error())
		return nil
	case err != nil:
		return fmt.Errorf("reading the multipart state %s: %w", stateKey, err)
	case st == nil:
		return nil // deleted meanwhile
	case st.UploadID == "" || !strings.HasPrefix(st.Target, jobID+"/"):
		s.Log.Info("a multipart state record names no upload of its job: dropped, nothing aborted", "key", stateKey, "target", st.Target, "uploadID", st.UploadID)
		return nil
	}
	if err := m.AbortMultipart(ctx, st.Target, st.UploadID); err != nil && !errors.Is(err, objects.ErrNoSuchUpload) {
		return fmt.Errorf("aborting multipart upload %s of %s (recorded at %s): %w", st.UploadID, st.Target, stateKey, err)
	}
	return nil
}

// abortOpenUploads aborts up to budget of the open multipart uploads the
// store lists under job jobID's prefix and says whether more remain (with
// no budget left: whether there may be some, unlisted).
func (s *Store) abortOpenUploads(ctx context.Context, jobID string, budget int) (int, bool, error) {
	m := multipartOf(s.Backend)
	if m == nil {
		return 0, false, nil
	}
	if budget <= 0 {
		return 0, true, nil
	}
	prefix := jobID + "/"
	ups, err := m.ListMultipartUploads(ctx, prefix)
	if err != nil {
		return 0, true, fmt.Errorf("listing the open multipart uploads of job %s: %w", jobID, err)
	}
	n := 0
	for _, u := range ups {
		if !strings.HasPrefix(u.Key, prefix) {
			continue
		}
		if n == budget {
			return n, true, nil
		}
		if err := m.AbortMultipart(ctx, u.Key, u.ID); err != nil && !errors.Is(err, objects.ErrNoSuchUpload) {
			return n, true, fmt.Errorf("aborting multipart upload %s of %s: %w", u.ID, u.Key, err)
		}
		n++
	}
	if n > 0 {
		s.Log.Info("aborted open multipart uploads of a swept job", "jobID", jobID, "count", n)
	}
	return n, false, nil
}

// AbortUnownedUploads aborts every open multipart upload the store lists
// whose job id (its key's first segment) owned says no live binding holds,
// asking owned once per job id, and returns how many it aborted. Keys
// under the server's own top-level prefixes (upload.ReservedDir...) are no
// job's and stay. owned's error stops it. It lists the whole store: call
// it once, when no replica may have seen a binding go (at start-up).
func (s *Store) AbortUnownedUploads(ctx context.Context, owned func(jobID string) (bool, error)) (int, error) {
	m := multipartOf(s.Backend)
	if m == nil {
		return 0, nil
	}
	ups, err := m.ListMultipartUploads(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("listing the store's open multipart uploads: %w", err)
	}
	owners := map[string]bool{}
	n := 0
	for _, u := range ups {
		job, _, ok := strings.Cut(u.Key, "/")
		if !ok || strings.HasPrefix(job, upload.ReservedDir) || objects.CheckJobID(job) != nil {
			continue
		}
		own, asked := owners[job]
		if !asked {
			if own, err = owned(job); err != nil {
				return n, err
			}
			owners[job] = own
		}
		if own {
			continue
		}
		if err := m.AbortMultipart(ctx, u.Key, u.ID); err != nil && !errors.Is(err, objects.ErrNoSuchUpload) {
			return n, fmt.Errorf("aborting multipart upload %s of %s: %w", u.ID, u.Key, err)
		}
		n++
	}
	return n, nil
}
