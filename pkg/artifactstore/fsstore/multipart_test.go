package fsstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// TestFSBackendMultipart runs the multipart contract on the backend as a
// server opens it, opening its root for every operation, and keeping
// metadata in files (file systems without user extended attributes).
func TestFSBackendMultipart(t *testing.T) {
	for name, newBackend := range map[string]func(t *testing.T) storetest.MultipartBackend{
		"Held": func(t *testing.T) storetest.MultipartBackend {
			b, err := NewFSBackend(filepath.Join(t.TempDir(), "store"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			return b
		},
		"Unheld":        func(t *testing.T) storetest.MultipartBackend { return FSBackend{Root: t.TempDir()} },
		"MetadataFiles": func(t *testing.T) storetest.MultipartBackend { return FSBackend{Root: t.TempDir(), metaFiles: true} },
	} {
		t.Run(name, func(t *testing.T) { storetest.MultipartSuite(t, newBackend) })
	}
}

// storeParts makes an upload to key of parts and returns it with the
// parts as stored.
func storeParts(t *testing.T, b FSBackend, key string, parts storetest.Parts) (string, []objects.Part) {
	t.Helper()
	ctx := context.Background()
	id, err := b.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	stored := make([]objects.Part, len(parts))
	for i, p := range parts {
		if stored[i], err = b.PutPart(ctx, key, id, i+1, bytes.NewReader(p), int64(len(p))); err != nil {
			t.Fatal(err)
		}
	}
	return id, stored
}

// The parts of an open upload are the backend's own files, never objects,
// and no sweep of stale temporary files takes them; a completed upload
// leaves the object as a plain file and nothing else.
func TestFSBackendMultipartLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := FSBackend{Root: root}
	parts := storetest.Parts{data(int(upload.MinPartSize), 1), data(777, 2)}
	id, stored := storeParts(t, b, "job/model.bin", parts)
	if _, err := os.Stat(filepath.Join(root, ".tether", "multipart", id, "2")); err != nil {
		t.Fatalf("part 2's file: %v", err)
	}
	// What a crash left of an upload being dropped: a directory without
	// its file "upload".
	crashed := filepath.Join(root, ".tether", "multipart", "0123456789abcdef0123456789abcdef")
	if err := os.MkdirAll(crashed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, "1"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if keys, err := b.List(ctx, ""); err != nil || len(keys) != 0 {
		t.Fatalf("List with an open upload: %q %v, want nothing", keys, err)
	}
	if err := b.RemoveStaleTemp(-time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(crashed); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the directory a crash left: %v, want it removed", err)
	}
	if got, err := b.ListParts(ctx, "job/model.bin", id); err != nil || len(got) != 2 {
		t.Fatalf("ListParts after the sweep: %+v %v, want both parts kept", got, err)
	}
	if _, err := b.CompleteMultipart(ctx, "job/model.bin", id, stored, upload.CRC64NVMEOf(parts.Whole())); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(root, "job", "model.bin")); err != nil || !bytes.Equal(got, parts.Whole()) {
		t.Fatalf("the object's file: %v (equal %v)", err, bytes.Equal(got, parts.Whole()))
	}
	for _, dir := range []string{filepath.Join(root, ".tether", "multipart"), filepath.Join(root, ".tether", "tmp")} {
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("%s holds %v after the completion", dir, left)
		}
	}
}

// An upload id is checked before it names a path: one that could reach
// outside the upload's directory is no upload, and nothing is touched.
func TestFSBackendMultipartIDs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b := FSBackend{Root: root}
	id, _ := storeParts(t, b, "job/a", storetest.Parts{data(10, 1)})
	for _, bad := range []string{"", "..", "../../job", id + "/..", "../" + id[3:], id[:31] + "G", id + "0", "." + id[1:]} {
		if _, err := b.ListParts(ctx, "job/a", bad); !errors.Is(err, objects.ErrNoSuchUpload) {
			t.Errorf("ListParts of upload %q: %v, want ErrNoSuchUpload", bad, err)
		}
		if _, err := b.PutPart(ctx, "job/a", bad, 1, bytes.NewReader([]byte("x")), 1); !errors.Is(err, objects.ErrNoSuchUpload) {
			t.Errorf("PutPart to upload %q: %v, want ErrNoSuchUpload", bad, err)
		}
		if err := b.AbortMultipart(ctx, "job/a", bad); err != nil {
			t.Errorf("AbortMultipart of upload %q: %v", bad, err)
		}
	}
	// The upload of another key is not this key's.
	if err := b.AbortMultipart(ctx, "job/b", id); err != nil {
		t.Fatal(err)
	}
	if parts, err := b.ListParts(ctx, "job/a", id); err != nil || len(parts) != 1 {
		t.Fatalf("ListParts after an abort under another key: %+v %v, want the upload kept", parts, err)
	}
	if _, err := b.CreateMultipart(ctx, ".tether/multipart/x"); !errors.Is(err, objects.ErrInvalidKey) {
		t.Fatalf("CreateMultipart of a key under .tether: %v, want ErrInvalidKey", err)
	}
}

// A completion is checked as S3 checks it: parts in order, as stored, all
// but the last at least 5 MiB; nothing is stored when it is refused.
func TestFSBackendMultipartRefusedCompletions(t *testing.T) {
	ctx := context.Background()
	b := FSBackend{Root: t.TempDir()}
	parts := storetest.Parts{data(int(upload.MinPartSize), 1), data(100, 2), data(100, 3)}
	id, stored := storeParts(t, b, "job/x", parts)
	crc := upload.CRC64NVMEOf(parts.Whole())
	other := stored[0]
	other.ETag = md5hex([]byte("other"))
	for name, named := range map[string][]objects.Part{
		"none":           nil,
		"out of order":   {stored[1], stored[0]},
		"another ETag":   {other, stored[1], stored[2]},
		"not stored":     {stored[0], {Number: 7, Size: 1, ETag: md5hex([]byte("x"))}},
		"a small middle": {stored[0], stored[1], stored[2]},
	} {
		if info, err := b.CompleteMultipart(ctx, "job/x", id, named, crc); err == nil {
			t.Errorf("completion with %s: %+v, want it refused", name, info)
		}
	}
	if _, err := b.Head(ctx, "job/x"); !errors.Is(err, upload.ErrNotFound) {
		t.Fatalf("Head after refused completions: %v", err)
	}
	if _, err := b.CompleteMultipart(ctx, "job/x", id, stored[:2], upload.CRC64NVMEOf(parts[:2].Whole())); err != nil {
		t.Fatalf("the upload after refused completions: %v", err)
	}
}

// A copy that cannot hard-link checks an object stored in parts by its
// CRC-64/NVME (its metadata's MD5 is not the data's) and keeps its ETag.
func TestFSBackendMultipartCopyData(t *testing.T) {
	ctx := context.Background()
	b := FSBackend{Root: t.TempDir()}
	parts := storetest.Parts{data(int(upload.MinPartSize), 1), data(100, 2)}
	id, stored := storeParts(t, b, "job/src", parts)
	want, err := b.CompleteMultipart(ctx, "job/src", id, stored, upload.CRC64NVMEOf(parts.Whole()))
	if err != nil {
		t.Fatal(err)
	}
	root, err := b.open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.release(root)
	f, fi, err := openObject(root, "job/src")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	meta, _, err := b.objectMeta(root, "job/src", f, fi)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.copyData(ctx, root, f, meta, "job/src", filepath.FromSlash("job/dst")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Head(ctx, "job/dst"); err != nil || got != want {
		t.Fatalf("Head of the copy: %+v %v, want %+v", got, err, want)
	}
	meta.CRC64NVME = upload.CRC64NVMEOf([]byte("other"))
	if err := b.copyData(ctx, root, f, meta, "job/src", filepath.FromSlash("job/bad")); err == nil {
		t.Fatal("a copy whose CRC-64/NVME is not the source's metadata's was made")
	}
	if _, err := b.Head(ctx, "job/bad"); !errors.Is(err, upload.ErrNotFound) {
		t.Fatalf("Head of the refused copy: %v", err)
	}
}
