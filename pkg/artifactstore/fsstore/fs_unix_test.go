//go:build unix

package fsstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/upload"
)

// xattrOf is the metadata attribute of a file, "" if it has none.
func xattrOf(t *testing.T, path string) string {
	t.Helper()
	var b [xattrPartsSize + 1]byte
	n, err := unix.Getxattr(path, metaXattr, b[:])
	if errors.Is(err, unix.ENODATA) {
		return ""
	}
	if err != nil {
		t.Fatalf("getxattr %s: %v", path, err)
	}
	return string(b[:n])
}

// TestFSBackendXattrMetadata: the metadata lives on the data file, no
// metadata file is written, and Head trusts it only while it describes the
// file.
func TestFSBackendXattrMetadata(t *testing.T) {
	root := t.TempDir()
	b := FSBackend{Root: root}
	probe := data(10, 1)
	if _, err := b.Put(context.Background(), "job/probe", bytes.NewReader(probe), int64(len(probe))); err != nil {
		t.Fatal(err)
	}
	if xattrOf(t, filepath.Join(root, "job", "probe")) == "" {
		t.Skip("the test directory's file system takes no user extended attributes")
	}
	path := func(key string) string { return filepath.Join(root, filepath.FromSlash(key)) }
	testMetadataRecovery(t, b, metadataAccess{
		read: func(t *testing.T, key string) []byte { return []byte(xattrOf(t, path(key))) },
		write: func(t *testing.T, key string, v []byte) {
			if err := unix.Setxattr(path(key), metaXattr, v, 0); err != nil {
				t.Fatal(err)
			}
		},
		remove: func(t *testing.T, key string) {
			if err := unix.Removexattr(path(key), metaXattr); err != nil {
				t.Fatal(err)
			}
		},
	})
	if _, err := os.Stat(filepath.Join(root, ".tether", "meta")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a metadata file was written next to the attribute: %v", err)
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

// TestFSBackendMultipartXattr: an object stored in parts keeps its part
// count and CRC-64/NVME in its attribute (no metadata file), a hard-linked
// copy shares them, and an object stored by Put keeps the short form.
func TestFSBackendMultipartXattr(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := FSBackend{Root: root}
	parts := storetest.Parts{data(int(upload.MinPartSize), 1), data(10, 2)}
	id, stored := storeParts(t, b, "job/.tether/pending/x", parts)
	want, err := b.CompleteMultipart(ctx, "job/.tether/pending/x", id, stored, upload.CRC64NVMEOf(parts.Whole()))
	if err != nil {
		t.Fatal(err)
	}
	attr := xattrOf(t, filepath.Join(root, "job", ".tether", "pending", "x"))
	if attr == "" {
		t.Skip("the test directory's file system takes no user extended attributes")
	}
	if len(attr) != xattrPartsSize || attr[0] != xattrPartsVersion {
		t.Fatalf("the attribute of an object stored in parts: %d bytes, version %d", len(attr), attr[0])
	}
	if err := b.Copy(ctx, "job/.tether/pending/x", "job/x"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "job/.tether/pending/x"); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Head(ctx, "job/x"); err != nil || info != want {
		t.Fatalf("Head of the copy: %+v %v, want %+v", info, err, want)
	}
	if _, err := os.Stat(filepath.Join(root, ".tether", "meta")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a metadata file was written next to the attribute: %v", err)
	}
	body := data(10, 3)
	if _, err := b.Put(ctx, "job/y", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	if attr := xattrOf(t, filepath.Join(root, "job", "y")); len(attr) != xattrSize || attr[0] != xattrVersion {
		t.Fatalf("the attribute of an object stored by Put: %d bytes", len(attr))
	}
}
