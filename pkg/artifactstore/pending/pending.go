package pending

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// Store does what a binding's end decides about its job's objects: Promote
// what its verified manifests list over the final keys, or DropPending,
// and sweep direct uploads never committed (sweep.go). Its Locks are the
// artifact store's (store.Store builds it so), which the endpoint's PUTs and
// commits take too: a PUT that chose its target under a key's lock finishes
// before a promotion of that key begins.
type Store struct {
	Backend upload.Backend
	// Locks is required: the per-key locks the endpoint's PUTs and commits
	// hold.
	Locks *objects.KeyLocks
	Log   logr.Logger
}

// VerifiedManifest is a node's verified manifest as its binding records it:
// the node's rank and the manifest's SHA-256 (ManifestResult.SHA256).
type VerifiedManifest struct {
	Rank   int
	SHA256 string
}

// NotAsListedError is a verified manifest whose listed version of a file,
// or the manifest itself, is no longer stored: overwritten after the
// verdict. The node's artifacts are not verified any more.
type NotAsListedError struct {
	Rank int
	// Path is relative to the node's prefix (upload.ManifestName for the
	// manifest itself).
	Path string
	Why  string
}

func (e *NotAsListedError) Error() string {
	return fmt.Sprintf("node %d: %s is not stored as its verified manifest lists it: %s", e.Rank, e.Path, e.Why)
}

// Promote puts in place exactly what the verified manifests list (call it
// when every node's manifest is verified and the TrainJob complete) and
// returns how many objects it moved. For each entry, a pending object that
// is the listed version (size and ETag) is moved over the final key; a final
// object that is the listed version stays; anything else is a
// *NotAsListedError. The manifest is read back from the store and checked
// against its recorded SHA-256 first. Every other pending object (uploads the
// manifests do not list, a later version of a listed file) is then dropped.
// Each object is copied, checked and only then its pending key deleted, so
// Promote can be called again after a failure or a crash. It stops at the
// first failure.
func (s *Store) Promote(ctx context.Context, jobID string, manifests []VerifiedManifest) (int, error) {
	if err := objects.CheckJobID(jobID); err != nil {
		return 0, err
	}
	n := 0
	for _, vm := range manifests {
		k, err := s.promoteManifest(ctx, jobID, vm)
		n += k
		if err != nil {
			return n, err
		}
	}
	// What no verified manifest lists is not promoted.
	if _, err := s.DropPending(ctx, jobID); err != nil {
		return n, err
	}
	if n > 0 {
		s.Log.Info("promoted pending artifacts", "jobID", jobID, "count", n)
	}
	return n, nil
}

// promoteManifest promotes what node vm.Rank's verified manifest lists,
// the manifest itself last (a crash before leaves it to be found again).
func (s *Store) promoteManifest(ctx context.Context, jobID string, vm VerifiedManifest) (int, error) {
	key := upload.ManifestKey(jobID, vm.Rank)
	buf, at, err := ReadVerifiedManifest(ctx, s.Backend, jobID, vm)
	if err != nil {
		return 0, err
	}
	m, perr := verify.Parse(buf, jobID)
	if perr != nil {
		return 0, &NotAsListedError{Rank: vm.Rank, Path: upload.ManifestName, Why: "the stored manifest is malformed: " + perr.Error()}
	}
	base := jobID + "/" + upload.NodePrefix(vm.Rank)
	n := 0
	for _, f := range m.Files {
		moved, err := s.promoteEntry(ctx, base+f.Path, f)
		if err != nil {
			var nl *NotAsListedError
			if errors.As(err, &nl) {
				nl.Rank, nl.Path = vm.Rank, f.Path
				return n, nl
			}
			return n, fmt.Errorf("promoting %s: %w", base+f.Path, err)
		}
		if moved {
			n++
		}
	}
	if at == objects.PendingKey(key) {
		sum := md5.Sum(buf)
		info := upload.ObjectInfo{Size: int64(len(buf)), ETag: hex.EncodeToString(sum[:]), CRC64NVME: upload.CRC64NVMEOf(buf)}
		if err := s.promoteLocked(ctx, at, key, info); err != nil {
			return n, fmt.Errorf("promoting %s: %w", key, err)
		}
		n++
	}
	return n, nil
}

// ReadVerifiedManifest reads node vm.Rank's manifest of job jobID, its
// pending version first (the latest upload), and returns the one whose
// SHA-256 is the recorded one, and the key it was read from: a
// *NotAsListedError when no stored version has it. A binding recorded
// before digests were (vm.SHA256 empty) takes the latest.
func ReadVerifiedManifest(ctx context.Context, b upload.Backend, jobID string, vm VerifiedManifest) ([]byte, string, error) {
	key := upload.ManifestKey(jobID, vm.Rank)
	o, ok := b.(objects.Opener)
	if !ok {
		return nil, "", errors.New("the artifact backend cannot read objects back: promotion needs the manifest")
	}
	for _, k := range []string{objects.PendingKey(key), key} {
		rc, info, err := o.Open(ctx, k)
		if errors.Is(err, upload.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", fmt.Errorf("reading %s: %w", k, err)
		}
		if info.Size > upload.MaxManifestSize {
			_ = rc.Close()
			continue
		}
		buf, err := io.ReadAll(io.LimitReader(rc, upload.MaxManifestSize+1))
		_ = rc.Close()
		if err != nil {
			return nil, "", fmt.Errorf("reading %s: %w", k, err)
		}
		if vm.SHA256 == "" || verify.ManifestDigest(buf) == vm.SHA256 {
			return buf, k, nil
		}
	}
	return nil, "", &NotAsListedError{Rank: vm.Rank, Path: upload.ManifestName,
		Why: "no stored version of the manifest has the SHA-256 recorded when it was verified (" + vm.SHA256 + "): it was changed or removed after the verdict"}
}

// promoteEntry puts entry f's listed version under key: it reports whether
// it moved the pending object.
func (s *Store) promoteEntry(ctx context.Context, key string, f upload.ManifestFile) (bool, error) {
	pk := objects.PendingKey(key)
	// Most entries have nothing to move: checked without the key's lock,
	// which a PUT still streaming holds (it is refused at its end, the
	// artifacts being final by then).
	if p, err := objects.HeadOpt(ctx, s.Backend, pk); err == nil && p == nil {
		if final, err := objects.HeadOpt(ctx, s.Backend, key); err == nil && final != nil && s.listed(*final, f) {
			return false, nil
		}
	}
	unlock := s.Locks.Lock(key)
	defer unlock()
	p, err := objects.HeadOpt(ctx, s.Backend, pk)
	if err != nil {
		return false, err
	}
	if p != nil && s.listed(*p, f) {
		return true, s.copyOver(ctx, pk, key, *p, func(dst upload.ObjectInfo) bool { return s.listed(dst, f) })
	}
	final, err := objects.HeadOpt(ctx, s.Backend, key)
	switch {
	case err != nil:
		return false, err
	case final != nil && s.listed(*final, f):
		return false, nil // a later upload, if pending, is dropped
	case final == nil && p == nil:
		return false, &NotAsListedError{Why: "no object is stored under its key"}
	}
	got := final
	if p != nil {
		got = p
	}
	return false, &NotAsListedError{Why: fmt.Sprintf("the manifest lists %d bytes with MD5 %s; the key holds %d bytes with MD5 %s (overwritten after the manifest was verified)",
		f.Size, f.MD5, got.Size, got.ETag)}
}

// listed says whether info is the version entry f lists.
func (s *Store) listed(info upload.ObjectInfo, f upload.ManifestFile) bool {
	return objects.VerificationOf(s.Backend).Listed(info, f)
}

func (s *Store) promoteLocked(ctx context.Context, pending, key string, want upload.ObjectInfo) error {
	unlock := s.Locks.Lock(key)
	defer unlock()
	src, err := s.Backend.Head(ctx, pending)
	if errors.Is(err, upload.ErrNotFound) {
		return nil // promoted meanwhile
	}
	if err != nil {
		return err
	}
	if !objects.VerificationOf(s.Backend).Holds(src, want.Size, want.ETag, want.CRC64NVME) {
		return fmt.Errorf("the pending object changed while it was promoted (size %d, ETag %s, CRC-64/NVME %q)", src.Size, src.ETag, src.CRC64NVME)
	}
	v := objects.VerificationOf(s.Backend)
	return s.copyOver(ctx, pending, key, src, func(dst upload.ObjectInfo) bool { return v.Holds(dst, want.Size, want.ETag, want.CRC64NVME) })
}

// copyOver copies pending (holding src) over key, checks the copy, and
// deletes pending. The caller holds key's lock, which orders this
// replica's writes of key; on a store that checks write conditions
// (objects.ConditionalWriter) the copy is a compare-and-set besides: the
// pending object must still be src and the key still what was read, so a
// promotion never overwrites what another replica decided. When the
// condition fails, the key is read again: holding what done accepts (the
// other replica promoted the same listed version) is success.
func (s *Store) copyOver(ctx context.Context, pending, key string, src upload.ObjectInfo, done func(upload.ObjectInfo) bool) error {
	cw, conditional := s.Backend.(objects.ConditionalWriter)
	var err error
	if conditional {
		var before *upload.ObjectInfo
		if before, err = objects.HeadOpt(ctx, s.Backend, key); err != nil {
			return err
		}
		c := objects.CopyCond{SrcETag: src.ETag, DstAbsent: before == nil}
		if before != nil {
			c.DstETag = before.ETag
		}
		err = cw.CopyIf(ctx, pending, key, c)
	} else {
		err = s.Backend.Copy(ctx, pending, key)
	}
	if errors.Is(err, objects.ErrPrecondition) || errors.Is(err, upload.ErrNotFound) {
		// Another replica wrote the key or moved the pending object.
		now, herr := objects.HeadOpt(ctx, s.Backend, key)
		if herr == nil && now != nil && done(*now) {
			s.Log.Info("another replica promoted the listed version first", "key", key)
			return s.dropIfStill(ctx, pending, src)
		}
		return fmt.Errorf("promoting %s: %w", key, err)
	}
	if err != nil {
		return err
	}
	dst, err := s.Backend.Head(ctx, key)
	if err != nil {
		return fmt.Errorf("checking the copy: %w", err)
	}
	if !objects.VerificationOf(s.Backend).Same(dst, src) {
		return fmt.Errorf("the copy has size %d, ETag %s and CRC-64/NVME %q, the pending object size %d, ETag %s and CRC-64/NVME %q",
			dst.Size, dst.ETag, dst.CRC64NVME, src.Size, src.ETag, src.CRC64NVME)
	}
	return s.Backend.Delete(ctx, pending)
}

// DropPending deletes every pending object of job jobID (call it when the
// binding fails: the final objects, from an earlier attempt, stay) and
// returns how many it deleted.
func (s *Store) DropPending(ctx context.Context, jobID string) (int, error) {
	keys, err := s.pendingKeys(ctx, jobID)
	if err != nil {
		return 0, err
	}
	if err := s.dropUploads(ctx, jobID); err != nil {
		return 0, err
	}
	prefix := objects.PendingPrefix(jobID)
	n := 0
	for _, pk := range keys {
		key := jobID + "/" + strings.TrimPrefix(pk, prefix)
		unlock := s.Locks.Lock(key)
		err := s.Backend.Delete(ctx, pk)
		unlock()
		if err != nil {
			return n, fmt.Errorf("dropping the pending object of %s: %w", key, err)
		}
		n++
	}
	if n > 0 {
		s.Log.Info("dropped pending artifacts", "jobID", jobID, "count", n)
	}
	return n, nil
}

func (s *Store) pendingKeys(ctx context.Context, jobID string) ([]string, error) {
	if err := objects.CheckJobID(jobID); err != nil {
		return nil, err
	}
	keys, err := s.Backend.List(ctx, objects.PendingPrefix(jobID))
	if err != nil {
		return nil, fmt.Errorf("listing pending objects of job %s: %w", jobID, err)
	}
	return keys, nil
}

// dropIfStill deletes pending if it still holds src (a later upload stays).
func (s *Store) dropIfStill(ctx context.Context, pending string, src upload.ObjectInfo) error {
	cur, err := objects.HeadOpt(ctx, s.Backend, pending)
	if err != nil || cur == nil {
		return err
	}
	if !objects.VerificationOf(s.Backend).Same(*cur, src) {
		return nil
	}
	return s.Backend.Delete(ctx, pending)
}
