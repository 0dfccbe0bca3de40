package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/tether-dev/tether/pkg/upload"
)

// ManifestResult is the outcome of a manifest PUT: what the manifest lists
// and whether every entry is stored as listed.
type ManifestResult struct {
	// Key is the manifest's key: <job-id>/manifest.json, or node Rank's
	// <job-id>/nodes/<rank>/manifest.json in a multi-node job.
	Key string
	// Rank is the node whose manifest it is; its entries are relative to
	// the node's prefix (upload.NodePrefix). PodUID is the manifest's
	// (empty from an older sidecar).
	Rank   int
	PodUID string
	// SHA256 is the manifest's own digest (lowercase hex): the binding
	// records it, promotion and readers check the stored manifest by it.
	SHA256 string
	// Files and Bytes count the manifest's entries and their sizes.
	Files, Bytes int64
	// Verified is true when every entry is stored with the listed size and
	// MD5 (its pending object if one exists, else its final object).
	Verified bool
	// Missing lists the first (at most 10) entries, in manifest order, that
	// are not stored or are stored with another size or MD5; MissingCount
	// counts them all.
	Missing      []string
	MissingCount int
	// Err says why the manifest is not verified: malformed, entries missing
	// or different, or the backend failed while checking. Empty if Verified.
	Err string
}

// maxMissing bounds ManifestResult.Missing.
const maxMissing = 10

// parseManifest decodes and checks a manifest for job jobID. Unknown fields
// are ignored (a newer sidecar may add some); everything the server relies
// on is checked.
func parseManifest(b []byte, jobID string) (*upload.Manifest, error) {
	var m upload.Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON manifest: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the manifest's JSON object")
	}
	if m.Version != upload.ManifestVersion {
		return nil, fmt.Errorf("version is %q; this server reads %q", m.Version, upload.ManifestVersion)
	}
	if m.JobID != jobID {
		return nil, fmt.Errorf("jobID is %q but the manifest was uploaded under job %q", m.JobID, jobID)
	}
	seen := make(map[string]struct{}, len(m.Files))
	for i, f := range m.Files {
		if f.Path == upload.ManifestName {
			return nil, fmt.Errorf("files[%d]: the manifest cannot list itself", i)
		}
		if _, _, e := checkKey(jobID + "/" + f.Path); e != nil {
			return nil, fmt.Errorf("files[%d]: path %q: %s", i, f.Path, e.message)
		}
		if _, dup := seen[f.Path]; dup {
			return nil, fmt.Errorf("files[%d]: path %q is listed twice", i, f.Path)
		}
		seen[f.Path] = struct{}{}
		if f.Size < 0 || f.Size > upload.MaxObjectSize {
			return nil, fmt.Errorf("files[%d] (%s): size %d is outside [0, %d]", i, f.Path, f.Size, upload.MaxObjectSize)
		}
		if len(f.MD5) != 32 || !isLowerHex(f.MD5) {
			return nil, fmt.Errorf("files[%d] (%s): md5 %q is not 32 lowercase hex characters", i, f.Path, f.MD5)
		}
	}
	return &m, nil
}

// entryState is the outcome of checking one manifest entry.
type entryState struct {
	missing string // why the entry is missing or different; "" if present
	err     error  // the backend failed
}

// verifyManifest checks every entry of m in b, with at most workers HEADs in
// flight. An entry counts when its pending object matches, or, if it has no
// pending object, its final object matches: the pending object, if any, is
// what the key will hold once the binding succeeds.
//
// The error is the first backend failure: the result is then not verified,
// and nothing can be said about the entries that could not be checked.
func verifyManifest(ctx context.Context, b upload.Backend, key string, rank int, m *upload.Manifest, workers int) (ManifestResult, error) {
	res := ManifestResult{Key: key, Rank: rank, PodUID: m.PodUID, Files: int64(len(m.Files))}
	base := m.JobID + "/" + upload.NodePrefix(rank)
	for _, f := range m.Files {
		res.Bytes += f.Size
	}
	states := make([]entryState, len(m.Files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(m.Files)) {
		wg.Go(func() {
			for i := range next {
				states[i] = checkEntry(ctx, b, base, m.Files[i])
			}
		})
	}
	for i := range m.Files {
		next <- i
	}
	close(next)
	wg.Wait()

	var firstMissing, firstErr string
	var backendErr error
	nMissing, nErr := 0, 0
	for i, s := range states {
		p := m.Files[i].Path
		switch {
		case s.err != nil:
			if nErr == 0 {
				firstErr = fmt.Sprintf("%s: %v", p, s.err)
				backendErr = fmt.Errorf("checking %s: %w", p, s.err)
			}
			nErr++
		case s.missing != "":
			if nMissing == 0 {
				firstMissing = fmt.Sprintf("%s (%s)", p, s.missing)
			}
			if len(res.Missing) < maxMissing {
				res.Missing = append(res.Missing, p)
			}
			nMissing++
		}
	}
	switch {
	case nErr > 0:
		res.Err = fmt.Sprintf("could not check %d of %d files (first: %s); upload the manifest again", nErr, len(m.Files), firstErr)
		if nMissing > 0 {
			res.Err += fmt.Sprintf("; %d files missing or different (first: %s)", nMissing, firstMissing)
		}
	case nMissing > 0:
		res.Err = fmt.Sprintf("%d of %d files missing or different (first: %s)", nMissing, len(m.Files), firstMissing)
	}
	res.MissingCount = nMissing
	res.Verified = nErr == 0 && nMissing == 0
	return res, backendErr
}

// checkEntry checks one entry; base is the node's prefix, <job-id>/ or
// <job-id>/nodes/<rank>/.
func checkEntry(ctx context.Context, b upload.Backend, base string, f upload.ManifestFile) entryState {
	key := base + f.Path
	info, err := b.Head(ctx, PendingKey(key))
	if errors.Is(err, upload.ErrNotFound) {
		info, err = b.Head(ctx, key)
	}
	switch {
	case errors.Is(err, upload.ErrNotFound):
		return entryState{missing: "not uploaded"}
	case err != nil:
		return entryState{err: err}
	case info.Size != f.Size:
		return entryState{missing: fmt.Sprintf("stored size %d, manifest says %d", info.Size, f.Size)}
	case info.ETag != f.MD5:
		return entryState{missing: fmt.Sprintf("stored MD5 %s, manifest says %s", info.ETag, f.MD5)}
	}
	return entryState{}
}
