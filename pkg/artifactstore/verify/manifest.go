package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
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

// Parse decodes and checks a stored manifest for job jobID (Decode on its
// bytes).
func Parse(b []byte, jobID string) (*upload.Manifest, error) {
	return Decode(bytes.NewReader(b), jobID)
}

// ManifestDigest is the lowercase hex SHA-256 of a manifest's bytes
// (ManifestResult.SHA256).
func ManifestDigest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Decode decodes and checks a manifest for job jobID as it streams
// from r: token by token, one entry at a time, so what it holds is the
// entries it kept, never a second copy of the document, and a manifest
// over upload.MaxManifestEntries is refused at the first entry too many.
// Object keys match their fields as encoding/json matches them (case
// folded, the last of a repeated key wins); unknown fields are skipped (a
// newer sidecar may add some); everything the server relies on is checked.
func Decode(r io.Reader, jobID string) (*upload.Manifest, error) {
	dec := json.NewDecoder(r)
	if err := wantDelim(dec, '{'); err != nil {
		return nil, fmt.Errorf("not a JSON manifest: %v", err)
	}
	var m upload.Manifest
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not a JSON manifest: %v", err)
		}
		name, _ := tok.(string)
		var field *string
		switch {
		case strings.EqualFold(name, "files"):
			files, err := decodeFiles(dec, jobID)
			if err != nil {
				return nil, err
			}
			m.Files = files
			continue
		case strings.EqualFold(name, "version"):
			field = &m.Version
		case strings.EqualFold(name, "jobID"):
			field = &m.JobID
		case strings.EqualFold(name, "podUID"):
			field = &m.PodUID
		}
		if field == nil {
			err = skipValue(dec)
		} else {
			err = dec.Decode(field)
		}
		if err != nil {
			return nil, fmt.Errorf("not a JSON manifest: field %q: %v", name, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
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
	return &m, nil
}

// decodeFiles decodes and checks the files array (or null), entry by entry.
func decodeFiles(dec *json.Decoder, jobID string) ([]upload.ManifestFile, error) {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return nil, fmt.Errorf("not a JSON manifest: files: %v", err)
	case tok == nil:
		return nil, nil
	case tok != json.Delim('['):
		return nil, fmt.Errorf("files is %v, not an array", tok)
	}
	files := []upload.ManifestFile{}
	seen := map[string]struct{}{}
	for i := 0; dec.More(); i++ {
		if i == upload.MaxManifestEntries {
			return nil, fmt.Errorf("the manifest lists more than %d files, the most one manifest may list: "+
				"exclude what need not be kept (annotation tether.dev/exclude) or pack small files into fewer, larger ones (docs/artifacts.md)",
				upload.MaxManifestEntries)
		}
		var f upload.ManifestFile
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("not a JSON manifest: files[%d]: %v", i, err)
		}
		if f.Path == upload.ManifestName {
			return nil, fmt.Errorf("files[%d]: the manifest cannot list itself", i)
		}
		if _, _, e := objects.CheckKey(jobID + "/" + f.Path); e != nil {
			return nil, fmt.Errorf("files[%d]: path %q: %s", i, f.Path, e.Message)
		}
		if _, dup := seen[f.Path]; dup {
			return nil, fmt.Errorf("files[%d]: path %q is listed twice", i, f.Path)
		}
		seen[f.Path] = struct{}{}
		if f.Size < 0 || f.Size > upload.MaxObjectSize {
			return nil, fmt.Errorf("files[%d] (%s): size %d is outside [0, %d]", i, f.Path, f.Size, upload.MaxObjectSize)
		}
		if len(f.MD5) != 32 || !objects.IsLowerHex(f.MD5) {
			return nil, fmt.Errorf("files[%d] (%s): md5 %q is not 32 lowercase hex characters", i, f.Path, f.MD5)
		}
		files = append(files, f)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, fmt.Errorf("not a JSON manifest: files: %v", err)
	}
	return files, nil
}

func wantDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("found %v where %v was expected", tok, d)
	}
	return nil
}

// skipValue reads one value token by token, keeping none of it.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// entryState is the outcome of checking one manifest entry.
type entryState struct {
	missing string // why the entry is missing or different; "" if present
	err     error  // the backend failed
}

// Manifest checks every entry of m (node rank's manifest, stored under
// key) in b, with at most workers HEADs in
// flight. An entry counts when its pending object matches, or, if it has no
// pending object, its final object matches: the pending object, if any, is
// what the key will hold once the binding succeeds.
//
// The error is the first backend failure: the result is then not verified,
// and nothing can be said about the entries that could not be checked.
func Manifest(ctx context.Context, b upload.Backend, key string, rank int, m *upload.Manifest, workers int) (ManifestResult, error) {
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
	info, err := b.Head(ctx, objects.PendingKey(key))
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
	case !objects.VerificationOf(b).Listed(info, f):
		if objects.VerificationOf(b).ByChecksum {
			return entryState{missing: fmt.Sprintf("stored CRC-64/NVME %q, manifest says %q (the store's ETags are not MD5s: an entry is verified by its checksum)", info.CRC64NVME, f.CRC64NVME)}
		}
		return entryState{missing: fmt.Sprintf("stored MD5 %s (CRC-64/NVME %q), manifest says %s (%q)", info.ETag, info.CRC64NVME, f.MD5, f.CRC64NVME)}
	}
	return entryState{}
}
