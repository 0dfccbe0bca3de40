package pending

import (
	"context"
	"errors"
	"sync"

	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// A node's verified manifest fixes what the node's artifacts are: the
// artifact endpoint refuses a verified node's write of a path the manifest
// does not list, and the read endpoint serves a Succeeded job's listed
// paths only. Both ask Listed, which reads each verified manifest from the
// store once (the version with the recorded SHA-256, as promotion does)
// and keeps the paths it lists, by digest: a manifest's bytes never change
// under its digest, so what is kept is never stale.

// MaxListedBytes bounds the memory a Listed keeps, over all manifests: each
// path counts its bytes and listedEntryOverhead for the map's entry. One
// manifest (at most upload.MaxManifestSize bytes and
// upload.MaxManifestEntries entries) always fits; the manifests asked for
// least recently are forgotten first and read again when asked for.
const MaxListedBytes = 64 << 20

// listedEntryOverhead is about what a map entry costs besides its key's
// bytes (the string header, the bucket slot).
const listedEntryOverhead = 48

// Listed answers whether verified manifests list paths. The zero value is
// ready to use; it is safe for concurrent use.
type Listed struct {
	// MaxBytes bounds the memory kept (0: MaxListedBytes).
	MaxBytes int

	mu    sync.Mutex
	sets  map[listedKey]*listedSet
	bytes int
	tick  uint64
	// reading are the manifests being read now.
	reading map[listedKey]*listedCall
}

// listedCall is one read of a manifest, which others asking meanwhile
// wait for.
type listedCall struct {
	done  chan struct{}
	paths map[string]struct{}
	err   error
}

type listedKey struct {
	jobID string
	rank  int
	sha   string
}

type listedSet struct {
	paths map[string]struct{}
	bytes int
	used  uint64
}

// Lists reports whether node vm.Rank's verified manifest of job jobID (the
// stored version whose SHA-256 is vm.SHA256) lists path, relative to the
// node's prefix (upload.NodePrefix). It errs when the manifest cannot be
// read now, and with a *NotAsListedError when no stored version has the
// recorded digest (changed or removed after its verdict) or it does not
// parse: then what it lists cannot be told.
func (l *Listed) Lists(ctx context.Context, b upload.Backend, jobID string, vm VerifiedManifest, path string) (bool, error) {
	k := listedKey{jobID: jobID, rank: vm.Rank, sha: vm.SHA256}
	set, err := l.set(ctx, b, jobID, vm, k)
	if err != nil {
		return false, err
	}
	_, ok := set[path]
	return ok, nil
}

// set returns what the manifest k lists: kept, or read once however many
// ask at the same time (the writes of a node just verified, the reads of a
// job just succeeded).
func (l *Listed) set(ctx context.Context, b upload.Backend, jobID string, vm VerifiedManifest, k listedKey) (map[string]struct{}, error) {
	l.mu.Lock()
	if s := l.sets[k]; s != nil {
		l.tick++
		s.used = l.tick
		l.mu.Unlock()
		return s.paths, nil
	}
	if c := l.reading[k]; c != nil {
		l.mu.Unlock()
		select {
		case <-c.done:
			if c.err != nil && ctx.Err() == nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
				// The reader's request ended, not this one's.
				return l.set(ctx, b, jobID, vm, k)
			}
			return c.paths, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &listedCall{done: make(chan struct{})}
	if l.reading == nil {
		l.reading = map[listedKey]*listedCall{}
	}
	l.reading[k] = c
	l.mu.Unlock()

	c.paths, c.err = read(ctx, b, jobID, vm)
	// A binding recorded before digests were names no version: not kept.
	if c.err == nil && vm.SHA256 != "" {
		l.put(k, c.paths)
	}
	l.mu.Lock()
	delete(l.reading, k)
	l.mu.Unlock()
	close(c.done)
	return c.paths, c.err
}

// read reads the paths node vm.Rank's verified manifest lists.
func read(ctx context.Context, b upload.Backend, jobID string, vm VerifiedManifest) (map[string]struct{}, error) {
	buf, _, err := ReadVerifiedManifest(ctx, b, jobID, vm)
	if err != nil {
		return nil, err
	}
	m, perr := verify.Parse(buf, jobID)
	if perr != nil {
		return nil, &NotAsListedError{Rank: vm.Rank, Path: upload.ManifestName, Why: "the stored manifest is malformed: " + perr.Error()}
	}
	paths := make(map[string]struct{}, len(m.Files))
	for _, f := range m.Files {
		paths[f.Path] = struct{}{}
	}
	return paths, nil
}

func (l *Listed) put(k listedKey, paths map[string]struct{}) {
	size := 0
	for p := range paths {
		size += len(p) + listedEntryOverhead
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sets == nil {
		l.sets = map[listedKey]*listedSet{}
	}
	if old := l.sets[k]; old != nil {
		l.bytes -= old.bytes
	}
	l.tick++
	l.sets[k] = &listedSet{paths: paths, bytes: size, used: l.tick}
	l.bytes += size
	limit := l.MaxBytes
	if limit <= 0 {
		limit = MaxListedBytes
	}
	for l.bytes > limit && len(l.sets) > 1 {
		var oldest listedKey
		var at uint64
		for key, s := range l.sets {
			if key != k && (at == 0 || s.used < at) {
				oldest, at = key, s.used
			}
		}
		l.bytes -= l.sets[oldest].bytes
		delete(l.sets, oldest)
	}
}

// IsNotListable says whether err means a verified manifest's listing
// cannot be told (its stored version changed, removed or malformed), as
// opposed to a store that cannot be read now.
func IsNotListable(err error) bool {
	var nl *NotAsListedError
	return errors.As(err, &nl)
}
