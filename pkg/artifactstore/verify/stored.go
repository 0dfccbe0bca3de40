package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// Stored checks node rank's manifest as b holds it, without
// a client's PUT: for a verdict that was never recorded (the manifest was
// stored, but the binding could not be written, say while the apiserver was
// away, and the sidecar's retries ran out). found is false when no manifest
// is stored for the node, or the backend cannot read objects back.
// workers bounds the HEADs in flight (Manifest).
func Stored(ctx context.Context, b upload.Backend, jobID string, rank, workers int) (res ManifestResult, found bool, err error) {
	o, ok := b.(objects.Opener)
	if !ok {
		return ManifestResult{}, false, nil
	}
	key := upload.ManifestKey(jobID, rank)
	// The latest manifest is the pending one if a manifest was stored
	// before it (a second flush of the same job, say).
	rc, info, err := o.Open(ctx, objects.PendingKey(key))
	if errors.Is(err, upload.ErrNotFound) {
		rc, info, err = o.Open(ctx, key)
	}
	if errors.Is(err, upload.ErrNotFound) {
		return ManifestResult{}, false, nil
	}
	if err != nil {
		return ManifestResult{}, false, fmt.Errorf("reading %s: %w", key, err)
	}
	defer rc.Close()
	if info.Size > upload.MaxManifestSize {
		return ManifestResult{Key: key, Rank: rank, Err: fmt.Sprintf("stored manifest is %d bytes, over %d", info.Size, upload.MaxManifestSize)}, true, nil
	}
	buf, err := io.ReadAll(io.LimitReader(rc, upload.MaxManifestSize+1))
	if err != nil {
		return ManifestResult{}, false, fmt.Errorf("reading %s: %w", key, err)
	}
	sum := ManifestDigest(buf)
	// Checked as the endpoint checks a PUT: the entries are not all held.
	s, perr := Scan(bytes.NewReader(buf), jobID)
	if perr != nil {
		return ManifestResult{Key: key, Rank: rank, SHA256: sum, Err: "malformed manifest: " + perr.Error()}, true, nil
	}
	res, err = ScannedManifest(ctx, b, key, rank, s, buf, workers)
	if err != nil {
		return ManifestResult{}, false, err
	}
	res.SHA256 = sum
	return res, true, nil
}

// Artifacts is the result as a node's artifacts on the binding.
func (r ManifestResult) Artifacts() tetherv1.NodeArtifacts {
	return tetherv1.NodeArtifacts{Manifest: r.Key, ManifestSHA256: r.SHA256, Verified: r.Verified, Files: int32(r.Files), Bytes: r.Bytes,
		Missing: r.Missing, MissingCount: int32(r.MissingCount), LastError: r.Err}
}
