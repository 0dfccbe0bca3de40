package fsstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

func TestFSBackendContract(t *testing.T) {
	runBackendSuite(t, func(t *testing.T) upload.Backend {
		b, err := NewFSBackend(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	})
}

// TestFSBackendUnheldContract: the zero value with Root, opening it for
// every operation.
func TestFSBackendUnheldContract(t *testing.T) {
	runBackendSuite(t, func(t *testing.T) upload.Backend { return FSBackend{Root: t.TempDir()} })
}

// TestFSBackendMetadataFilesContract: the layout of file systems without
// user extended attributes.
func TestFSBackendMetadataFilesContract(t *testing.T) {
	runBackendSuite(t, func(t *testing.T) upload.Backend { return FSBackend{Root: t.TempDir(), metaFiles: true} })
}

func TestFSBackendLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := FSBackend{Root: root}
	body := data(3000, 1)
	if _, err := b.Put(ctx, "job/ckpt/a b.pt", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	// The object is a plain file at its key.
	got, err := os.ReadFile(filepath.Join(root, "job", "ckpt", "a b.pt"))
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("object file: %v", err)
	}
	// No temporary file is left behind, and the backend's own files are not keys.
	if tmp, _ := os.ReadDir(filepath.Join(root, ".tether", "tmp")); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
	if keys, err := b.List(ctx, ""); err != nil || !slices.Equal(keys, []string{"job/ckpt/a b.pt"}) {
		t.Fatalf("List: %q %v", keys, err)
	}
	// Delete removes the directories it empties.
	if err := b.Delete(ctx, "job/ckpt/a b.pt"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "job")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("job directory after Delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, ".tether", "meta", "job")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("metadata directory after Delete: %v", err)
	}
}

func TestFSBackendRejectsEscapes(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	outside := filepath.Join(parent, "outside")
	if err := os.MkdirAll(filepath.Join(root, "job"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A symbolic link inside Root pointing outside it.
	if err := os.Symlink(outside, filepath.Join(root, "job", "link")); err != nil {
		t.Fatal(err)
	}
	b := FSBackend{Root: root}
	for _, key := range []string{"../outside/x", "job/../../outside/x", "/abs", "job//x", "job/./x", ".tether/meta/job/x", "job/\x00"} {
		if _, err := b.Put(ctx, key, bytes.NewReader([]byte("x")), 1); !errors.Is(err, objects.ErrInvalidKey) {
			t.Errorf("Put %q: %v, want objects.ErrInvalidKey", key, err)
		}
		if _, err := b.Head(ctx, key); err == nil {
			t.Errorf("Head %q succeeded", key)
		}
		if err := b.Delete(ctx, key); err == nil {
			t.Errorf("Delete %q succeeded", key)
		}
	}
	if _, err := b.Put(ctx, "job/link/x", bytes.NewReader([]byte("x")), 1); err == nil {
		t.Error("Put through a symbolic link out of Root succeeded")
	}
	if _, err := b.Head(ctx, "job/link/secret"); err == nil {
		t.Error("Head through a symbolic link out of Root succeeded")
	}
	if err := b.Copy(ctx, "job/link/secret", "job/stolen"); err == nil {
		t.Error("Copy through a symbolic link out of Root succeeded")
	}
	if err := b.Delete(ctx, "job/link/secret"); err == nil {
		if _, serr := os.Stat(filepath.Join(outside, "secret")); serr != nil {
			t.Error("Delete through a symbolic link removed a file outside Root")
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("files outside Root: %v", entries)
	}
}

func TestFSBackendKeyConflict(t *testing.T) {
	ctx := context.Background()
	b := FSBackend{Root: t.TempDir()}
	if _, err := b.Put(ctx, "job/a", bytes.NewReader([]byte("x")), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "job/a/b", bytes.NewReader([]byte("y")), 1); !errors.Is(err, objects.ErrKeyConflict) {
		t.Fatalf("Put under an object: %v, want objects.ErrKeyConflict", err)
	}
	if _, err := b.Put(ctx, "job/d/e", bytes.NewReader([]byte("y")), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "job/d", bytes.NewReader([]byte("z")), 1); !errors.Is(err, objects.ErrKeyConflict) {
		t.Fatalf("Put over a directory: %v, want objects.ErrKeyConflict", err)
	}
	if _, err := b.Head(ctx, "job/a/b"); !errors.Is(err, upload.ErrNotFound) {
		t.Fatalf("Head under an object: %v", err)
	}
	if keys, _ := b.List(ctx, "job/"); !slices.Equal(keys, []string{"job/a", "job/d/e"}) {
		t.Fatalf("List: %q", keys)
	}
	if tmp, _ := os.ReadDir(filepath.Join(b.Root, ".tether", "tmp")); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
}

// metadataAccess reaches an object's recorded metadata the way a test needs
// to: as a metadata file, or as its data file's extended attribute.
type metadataAccess struct {
	read   func(t *testing.T, key string) []byte
	write  func(t *testing.T, key string, v []byte)
	remove func(t *testing.T, key string)
}

// testMetadataRecovery: Head trusts the recorded metadata only while it
// describes the data file, and records it again when it was lost.
func testMetadataRecovery(t *testing.T, b FSBackend, m metadataAccess) {
	ctx := context.Background()
	v1, v2 := data(5000, 1), data(5000, 2)
	if _, err := b.Put(ctx, "job/x", bytes.NewReader(v1), int64(len(v1))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(b.Root, "job", "x")

	// Lost metadata is computed again and recorded again.
	m.remove(t, "job/x")
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v1) {
		t.Fatalf("Head without metadata: %+v %v", info, err)
	}
	if len(m.read(t, "job/x")) == 0 {
		t.Fatal("metadata not recorded again")
	}

	// Another file's metadata: a crash between a metadata file's rename and
	// its data file's, or a file copied by hand with its attributes.
	if _, err := b.Put(ctx, "job/y", bytes.NewReader(v2), int64(len(v2))); err != nil {
		t.Fatal(err)
	}
	m.write(t, "job/x", m.read(t, "job/y"))
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v1) {
		t.Fatalf("Head with another file's metadata: %+v %v", info, err)
	}

	// A file changed by hand in place (same size).
	if err := os.WriteFile(file, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	_ = os.Chtimes(file, future, future)
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v2) {
		t.Fatalf("Head after a change by hand: %+v %v", info, err)
	}

	// Garbage metadata.
	m.write(t, "job/x", []byte("{garbage"))
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v2) {
		t.Fatalf("Head with garbage metadata: %+v %v", info, err)
	}
}

// TestFSBackendMetadataRecovery: with metadata files (fs_unix_test.go: the
// extended attribute).
func TestFSBackendMetadataRecovery(t *testing.T) {
	b := FSBackend{Root: t.TempDir(), metaFiles: true}
	path := func(key string) string { return filepath.Join(b.Root, ".tether", "meta", filepath.FromSlash(key)) }
	testMetadataRecovery(t, b, metadataAccess{
		read: func(t *testing.T, key string) []byte {
			v, err := os.ReadFile(path(key))
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return v
		},
		write: func(t *testing.T, key string, v []byte) {
			if err := os.WriteFile(path(key), v, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(t *testing.T, key string) {
			if err := os.Remove(path(key)); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestFSBackendCopyLinks(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := FSBackend{Root: root}
	body := data(10000, 3)
	if _, err := b.Put(ctx, "job/.tether/pending/big", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	if err := b.Copy(ctx, "job/.tether/pending/big", "job/big"); err != nil {
		t.Fatal(err)
	}
	src, _ := os.Stat(filepath.Join(root, "job", ".tether", "pending", "big"))
	dst, _ := os.Stat(filepath.Join(root, "job", "big"))
	if !os.SameFile(src, dst) {
		t.Log("Copy did not hard-link (file system without links?)")
	}
	if err := b.Delete(ctx, "job/.tether/pending/big"); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Head(ctx, "job/big"); err != nil || info.ETag != md5hex(body) {
		t.Fatalf("Head after the source's Delete: %+v %v", info, err)
	}
}

func TestFSBackendRemoveStaleTemp(t *testing.T) {
	root := t.TempDir()
	b := FSBackend{Root: root}
	dir := filepath.Join(root, ".tether", "tmp")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(dir, "old.part"), filepath.Join(dir, "fresh.part")
	for _, f := range []string{old, fresh} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	_ = os.Chtimes(old, past, past)
	if err := b.RemoveStaleTemp(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temporary file: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh temporary file: %v", err)
	}
}
