package verify

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
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
// Scan checks the same without keeping the entries.
func Decode(r io.Reader, jobID string) (*upload.Manifest, error) {
	var files []upload.ManifestFile
	m, err := decode(json.NewDecoder(r), jobID, visitor{
		files: func(null bool) {
			// Each "files" member starts over: the last one wins.
			files = nil
			if !null {
				files = []upload.ManifestFile{}
			}
		},
		entry:  func(f upload.ManifestFile) error { files = append(files, f); return nil },
		unique: true,
	})
	if err != nil {
		return nil, err
	}
	m.Files = files
	return m, nil
}

// visitor is what decode hands a manifest's entries to.
type visitor struct {
	// files is called as each "files" member starts (null: it is null).
	files func(null bool)
	// entry is called with each checked entry of the current member; its
	// error stops the decoding.
	entry func(f upload.ManifestFile) error
	// unique refuses a path listed twice in one member (Entries, reading
	// again what Scan accepted, does not look again).
	unique bool
}

// decode reads a manifest for job jobID from dec, checks everything but
// the entries' presence in the store, and returns its fields without its
// entries, which go to v.
func decode(dec *json.Decoder, jobID string, v visitor) (*upload.Manifest, error) {
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
			if err := decodeFiles(dec, jobID, v); err != nil {
				return nil, err
			}
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
		if errors.Is(err, errValueTooLong) {
			return nil, fmt.Errorf("not a JSON manifest: %v", err)
		}
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

// pathDigest stands for a path in the set of a member's paths: the set
// then costs 16 bytes an entry, not the path. Two paths with one digest
// would be refused as listed twice, never accepted.
type pathDigest [16]byte

// decodeFiles decodes and checks the files array (or null), entry by entry.
func decodeFiles(dec *json.Decoder, jobID string, v visitor) error {
	tok, err := dec.Token()
	switch {
	case err != nil:
		return fmt.Errorf("not a JSON manifest: files: %v", err)
	case tok == nil:
		v.files(true)
		return nil
	case tok != json.Delim('['):
		return fmt.Errorf("files is %v, not an array", tok)
	}
	v.files(false)
	var seen map[pathDigest]struct{}
	if v.unique {
		seen = map[pathDigest]struct{}{}
	}
	// One entry and one path buffer for all: a manifest of 100,000
	// entries then allocates about half as much (its garbage is what the
	// collector works for while it is read).
	var f upload.ManifestFile
	var path []byte
	for i := 0; dec.More(); i++ {
		if i == upload.MaxManifestEntries {
			return fmt.Errorf("the manifest lists more than %d files, the most one manifest may list: "+
				"exclude what need not be kept (annotation tether.dev/exclude) or pack small files into fewer, larger ones (docs/artifacts.md)",
				upload.MaxManifestEntries)
		}
		f = upload.ManifestFile{}
		if err := dec.Decode(&f); err != nil {
			return fmt.Errorf("not a JSON manifest: files[%d]: %v", i, err)
		}
		if f.Path == upload.ManifestName {
			return fmt.Errorf("files[%d]: the manifest cannot list itself", i)
		}
		if _, _, e := objects.CheckKey(jobID + "/" + f.Path); e != nil {
			return fmt.Errorf("files[%d]: path %q: %s", i, f.Path, e.Message)
		}
		if seen != nil {
			path = append(path[:0], f.Path...)
			s := sha256.Sum256(path)
			d := pathDigest(s[:16])
			if _, dup := seen[d]; dup {
				return fmt.Errorf("files[%d]: path %q is listed twice", i, f.Path)
			}
			seen[d] = struct{}{}
		}
		if f.Size < 0 || f.Size > upload.MaxObjectSize {
			return fmt.Errorf("files[%d] (%s): size %d is outside [0, %d]", i, f.Path, f.Size, upload.MaxObjectSize)
		}
		if len(f.MD5) != 32 || !objects.IsLowerHex(f.MD5) {
			return fmt.Errorf("files[%d] (%s): md5 %q is not 32 lowercase hex characters", i, f.Path, f.MD5)
		}
		if err := v.entry(f); err != nil {
			return err
		}
		yieldEvery(i, 256)
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return fmt.Errorf("not a JSON manifest: files: %v", err)
	}
	return nil
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
	var size int64
	for _, f := range m.Files {
		size += f.Size
	}
	return check(ctx, b, key, rank, m.JobID, m.PodUID, int64(len(m.Files)), size, func(fn func(upload.ManifestFile) error) error {
		for _, f := range m.Files {
			if err := fn(f); err != nil {
				return err
			}
		}
		return nil
	}, workers)
}

// check is Manifest over the entries each yields in manifest order (files
// of them, of size bytes in all): the verdict is the same as if they were
// all held, but only the entries in flight are.
func check(ctx context.Context, b upload.Backend, key string, rank int, jobID, podUID string, files, size int64,
	each func(func(upload.ManifestFile) error) error, workers int) (ManifestResult, error) {
	res := ManifestResult{Key: key, Rank: rank, PodUID: podUID, Files: files, Bytes: size}
	base := jobID + "/" + upload.NodePrefix(rank)
	type indexed struct {
		i int
		f upload.ManifestFile
	}
	next := make(chan indexed)
	n := int(min(int64(max(workers, 1)), files))
	tallies := make([]tally, n)
	var wg sync.WaitGroup
	for w := range n {
		t := &tallies[w]
		*t = newTally()
		wg.Go(func() {
			for e := range next {
				t.add(e.i, e.f.Path, checkEntry(ctx, b, base, e.f))
				yieldEvery(e.i, 64)
			}
		})
	}
	i := 0
	eerr := each(func(f upload.ManifestFile) error {
		next <- indexed{i, f}
		i++
		return nil
	})
	close(next)
	wg.Wait()
	if eerr == nil && int64(i) != files {
		eerr = fmt.Errorf("the manifest lists %d files, %d were read again", files, i)
	}
	if eerr != nil {
		res.Err = "the manifest's entries could not be read again: " + eerr.Error() + "; upload the manifest again"
		return res, fmt.Errorf("reading the entries of %s: %w", key, eerr)
	}
	t := newTally()
	for w := range tallies {
		t.merge(&tallies[w])
	}
	var backendErr error
	switch {
	case t.failed > 0:
		backendErr = fmt.Errorf("checking %s: %w", t.failPath, t.failErr)
		res.Err = fmt.Sprintf("could not check %d of %d files (first: %s: %v); upload the manifest again", t.failed, files, t.failPath, t.failErr)
		if t.missing > 0 {
			res.Err += fmt.Sprintf("; %d files missing or different (first: %s)", t.missing, t.firstMissing)
		}
	case t.missing > 0:
		res.Err = fmt.Sprintf("%d of %d files missing or different (first: %s)", t.missing, files, t.firstMissing)
	}
	for _, m := range t.listed {
		res.Missing = append(res.Missing, m.path)
	}
	res.MissingCount = t.missing
	res.Verified = t.failed == 0 && t.missing == 0
	return res, backendErr
}

// yieldEvery lets other goroutines run every n-th step of a long loop
// (i counts the steps). A manifest of 100,000 entries is read, checked and
// read again for about a second of CPU; the scheduler would let it run
// 10 ms at a time, so every request waiting behind it (another tenant's
// small manifest: a read, a write, a few HEADs, each a wait) would wait
// that long at each step. A yield every few hundred microseconds keeps
// them moving, for a cost of well under 1%.
func yieldEvery(i, n int) {
	if i%n == n-1 {
		runtime.Gosched()
	}
}

// tally is what a manifest's checked entries add up to, in manifest order
// whatever order they were checked in: counts, the first failure and first
// missing entry, and the first maxMissing missing paths.
type tally struct {
	missing, failed int
	// missAt and failAt are the first missing and failed entries' indices
	// (-1: none).
	missAt, failAt int
	firstMissing   string
	failPath       string
	failErr        error
	listed         []listedPath
}

type listedPath struct {
	i    int
	path string
}

func newTally() tally { return tally{missAt: -1, failAt: -1} }

func (t *tally) add(i int, path string, s entryState) {
	switch {
	case s.err != nil:
		t.failed++
		if t.failAt < 0 || i < t.failAt {
			t.failAt, t.failPath, t.failErr = i, path, s.err
		}
	case s.missing != "":
		t.missing++
		if t.missAt < 0 || i < t.missAt {
			t.missAt, t.firstMissing = i, fmt.Sprintf("%s (%s)", path, s.missing)
		}
		t.list(listedPath{i, path})
	}
}

// list keeps p if it is among the first maxMissing missing entries.
func (t *tally) list(p listedPath) {
	at, _ := slices.BinarySearchFunc(t.listed, p.i, func(l listedPath, i int) int { return cmp.Compare(l.i, i) })
	if at >= maxMissing {
		return
	}
	t.listed = slices.Insert(t.listed, at, p)
	if len(t.listed) > maxMissing {
		t.listed = t.listed[:maxMissing]
	}
}

func (t *tally) merge(o *tally) {
	t.missing += o.missing
	t.failed += o.failed
	if o.failAt >= 0 && (t.failAt < 0 || o.failAt < t.failAt) {
		t.failAt, t.failPath, t.failErr = o.failAt, o.failPath, o.failErr
	}
	if o.missAt >= 0 && (t.missAt < 0 || o.missAt < t.missAt) {
		t.missAt, t.firstMissing = o.missAt, o.firstMissing
	}
	for _, p := range o.listed {
		t.list(p)
	}
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
