package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tether-dev/tether/pkg/upload"
)

func checkJobID(jobID string) error {
	if jobID == "" || jobID == "." || jobID == ".." || strings.ContainsAny(jobID, "/\x00") {
		return fmt.Errorf("%w: job id %q", ErrInvalidKey, jobID)
	}
	return nil
}

// Promote moves every pending object of job jobID over its final key (call
// it when the binding succeeds) and returns how many it moved. Each object is
// copied, checked (size and ETag) and only then its pending key deleted, so
// Promote can be called again after a failure or a crash. It stops at the
// first failure.
func (h *Handler) Promote(ctx context.Context, jobID string) (int, error) {
	keys, err := h.pendingKeys(ctx, jobID)
	if err != nil {
		return 0, err
	}
	// Direct uploads never committed are not promoted: nothing verified them.
	if err := h.dropUploads(ctx, jobID); err != nil {
		return 0, err
	}
	prefix := pendingPrefix(jobID)
	n := 0
	for _, pk := range keys {
		key := jobID + "/" + strings.TrimPrefix(pk, prefix)
		if err := h.promote(ctx, pk, key); err != nil {
			return n, fmt.Errorf("promoting %s: %w", key, err)
		}
		n++
	}
	if n > 0 {
		h.Log.Info("promoted pending artifacts", "jobID", jobID, "count", n)
	}
	return n, nil
}

func (h *Handler) promote(ctx context.Context, pending, key string) error {
	unlock := h.locks.lock(key)
	defer unlock()
	src, err := h.Backend.Head(ctx, pending)
	if errors.Is(err, upload.ErrNotFound) {
		return nil // promoted or dropped meanwhile
	}
	if err != nil {
		return err
	}
	if err := h.Backend.Copy(ctx, pending, key); err != nil {
		return err
	}
	dst, err := h.Backend.Head(ctx, key)
	if err != nil {
		return fmt.Errorf("checking the copy: %w", err)
	}
	if dst != src {
		return fmt.Errorf("the copy has size %d and ETag %s, the pending object size %d and ETag %s", dst.Size, dst.ETag, src.Size, src.ETag)
	}
	return h.Backend.Delete(ctx, pending)
}

// DropPending deletes every pending object of job jobID (call it when the
// binding fails: the final objects, from an earlier attempt, stay) and
// returns how many it deleted.
func (h *Handler) DropPending(ctx context.Context, jobID string) (int, error) {
	keys, err := h.pendingKeys(ctx, jobID)
	if err != nil {
		return 0, err
	}
	if err := h.dropUploads(ctx, jobID); err != nil {
		return 0, err
	}
	prefix := pendingPrefix(jobID)
	n := 0
	for _, pk := range keys {
		key := jobID + "/" + strings.TrimPrefix(pk, prefix)
		unlock := h.locks.lock(key)
		err := h.Backend.Delete(ctx, pk)
		unlock()
		if err != nil {
			return n, fmt.Errorf("dropping the pending object of %s: %w", key, err)
		}
		n++
	}
	if n > 0 {
		h.Log.Info("dropped pending artifacts", "jobID", jobID, "count", n)
	}
	return n, nil
}

func (h *Handler) pendingKeys(ctx context.Context, jobID string) ([]string, error) {
	if err := checkJobID(jobID); err != nil {
		return nil, err
	}
	keys, err := h.Backend.List(ctx, pendingPrefix(jobID))
	if err != nil {
		return nil, fmt.Errorf("listing pending objects of job %s: %w", jobID, err)
	}
	return keys, nil
}
