//go:build unix

package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// xattrOf is the metadata attribute of a file, "" if it has none.
func xattrOf(t *testing.T, path string) string {
	t.Helper()
	var b [xattrSize + 1]byte
	n, err := unix.Getxattr(path, metaXattr, b[:])
	if errors.Is(err, unix.ENODATA) {
		return ""
	}
	if err != nil {
		t.Fatalf("getxattr %s: %v", path, err)
	}
	return string(b[:n])
}

// TestFSBackendXattrMetadata: the metadata lives on the data file and Head
// trusts it only while it describes the file.
func TestFSBackendXattrMetadata(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := FSBackend{Root: root}
	v1, v2 := data(5000, 1), data(5000, 2)
	if _, err := b.Put(ctx, "job/x", bytes.NewReader(v1), int64(len(v1))); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "job", "x")
	if xattrOf(t, file) == "" {
		t.Skip("the test directory's file system takes no user extended attributes")
	}
	if _, err := os.Stat(filepath.Join(root, ".tether", "meta")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a metadata file was written next to the attribute: %v", err)
	}
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v1) || info.Size != int64(len(v1)) {
		t.Fatalf("Head: %+v %v", info, err)
	}

	// Lost metadata is computed again and recorded again.
	if err := unix.Removexattr(file, metaXattr); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v1) {
		t.Fatalf("Head without metadata: %+v %v", info, err)
	}
	if xattrOf(t, file) == "" {
		t.Fatal("metadata not recorded again")
	}

	// Another file's metadata (a file copied by hand with its attributes).
	if _, err := b.Put(ctx, "job/y", bytes.NewReader(v2), int64(len(v2))); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(file, metaXattr, []byte(xattrOf(t, filepath.Join(root, "job", "y"))), 0); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v1) {
		t.Fatalf("Head with another file's metadata: %+v %v", info, err)
	}

	// A file changed by hand in place (same size, same inode).
	if err := os.WriteFile(file, v2, 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	_ = os.Chtimes(file, future, future)
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v2) {
		t.Fatalf("Head after a change by hand: %+v %v", info, err)
	}

	// Garbage metadata.
	if err := unix.Setxattr(file, metaXattr, []byte("{garbage"), 0); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v2) {
		t.Fatalf("Head with garbage metadata: %+v %v", info, err)
	}
}

// TestFSBackendReadsMetadataFiles: a store written with metadata files (an
// older Tether, or a file system without extended attributes) reads the same
// with extended attributes on.
func TestFSBackendReadsMetadataFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	old, b := FSBackend{Root: root, metaFiles: true}, FSBackend{Root: root}
	v1, v2 := data(7000, 1), data(7000, 2)
	for _, k := range []string{"job/x", "job/.tether/pending/y"} {
		if _, err := old.Put(ctx, k, bytes.NewReader(v1), int64(len(v1))); err != nil {
			t.Fatal(err)
		}
	}
	if xattrOf(t, filepath.Join(root, "job", "x")) != "" {
		t.Fatal("metaFiles wrote the attribute")
	}
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v1) {
		t.Fatalf("Head of an older object: %+v %v", info, err)
	}
	// A hard-linked copy of an older object has a metadata file of its own:
	// it outlives its source's.
	if err := b.Copy(ctx, "job/.tether/pending/y", "job/y"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "job/.tether/pending/y"); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Head(ctx, "job/y"); err != nil || info.ETag != md5hex(v1) {
		t.Fatalf("Head of a copy of an older object: %+v %v", info, err)
	}
	// An older object replaced: the new attribute wins over the stale file.
	if _, err := b.Put(ctx, "job/x", bytes.NewReader(v2), int64(len(v2))); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Head(ctx, "job/x"); err != nil || info.ETag != md5hex(v2) {
		t.Fatalf("Head after replacing an older object: %+v %v", info, err)
	}
	// Delete removes an older object's metadata file with it.
	if err := b.Delete(ctx, "job/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".tether", "meta", "job", "x")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("metadata file after Delete: %v", err)
	}
}
