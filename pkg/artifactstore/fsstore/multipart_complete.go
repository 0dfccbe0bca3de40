package fsstore

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// CompleteMultipart makes key the concatenation of parts if crc is their
// CRC-64/NVME (joined from the parts' own, computed as each was written),
// and drops the upload. A wrong crc, or a part that is not stored as
// named, is refused before anything is written.
func (b FSBackend) CompleteMultipart(ctx context.Context, key, id string, parts []objects.Part, crc string) (upload.ObjectInfo, error) {
	p, err := fsPath(key)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	root, err := b.open()
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	defer b.release(root)
	dir, err := openUpload(root, key, id)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	stored, err := openParts(root, dir, parts)
	defer func() {
		for _, sp := range stored {
			_ = sp.f.Close()
		}
	}()
	if err != nil {
		return upload.ObjectInfo{}, fmt.Errorf("completing upload %s of %s: %w", id, key, err)
	}
	meta := joinParts(stored)
	if meta.CRC64NVME != crc {
		return upload.ObjectInfo{}, fmt.Errorf("completing upload %s of %s: the parts' CRC-64/NVME is %s, not the %q claimed: the parts are not the object's bytes (nothing was stored)", id, key, meta.CRC64NVME, crc)
	}
	tmp, f, err := createTemp(root)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	committed := false
	defer func() {
		_ = f.Close()
		if !committed {
			_ = root.Remove(tmp)
		}
	}()
	if err := concatParts(ctx, f, stored); err != nil {
		return upload.ObjectInfo{}, fmt.Errorf("completing upload %s of %s: %w", id, key, err)
	}
	meta, inXattr, err := b.recordTemp(f, meta)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	if err := commit(root, tmp, p, meta, !inXattr); err != nil {
		return upload.ObjectInfo{}, err
	}
	committed = true
	_ = dropUpload(root, dir)
	return upload.ObjectInfo{Size: meta.Size, ETag: meta.etag(), CRC64NVME: meta.CRC64NVME}, nil
}

// openParts opens the stored parts named, checking them as S3 does: in
// ascending order, each stored with the ETag named, every one but the
// last at least upload.MinPartSize. The caller closes what it returns,
// also with an error.
func openParts(root *os.Root, dir string, parts []objects.Part) ([]storedPart, error) {
	if len(parts) == 0 {
		return nil, errors.New("no parts named; a completion names at least one")
	}
	var stored []storedPart
	for i, want := range parts {
		if i > 0 && want.Number <= parts[i-1].Number {
			return stored, fmt.Errorf("part %d follows part %d: parts are completed in ascending order", want.Number, parts[i-1].Number)
		}
		sp, err := openPart(root, dir, want.Number)
		if errors.Is(err, fs.ErrNotExist) {
			return stored, fmt.Errorf("part %d is not stored", want.Number)
		}
		if err != nil {
			return stored, err
		}
		stored = append(stored, sp)
		if got := sp.part(want.Number); got.ETag != want.ETag {
			return stored, fmt.Errorf("part %d is stored with ETag %s, not %s", want.Number, got.ETag, want.ETag)
		}
		if sp.hdr.size < upload.MinPartSize && i < len(parts)-1 {
			return stored, fmt.Errorf("part %d has %d bytes: every part but the last has at least %d (5 MiB)", want.Number, sp.hdr.size, upload.MinPartSize)
		}
	}
	return stored, nil
}

// joinParts is the metadata of the object the parts make: the MD5 of
// their MD5s (the multipart ETag), and their CRCs joined.
func joinParts(stored []storedPart) fsMeta {
	h := md5.New()
	var crc crcJoin
	for _, sp := range stored {
		h.Write(sp.hdr.md5[:])
		crc.add(sp.hdr.crc, sp.hdr.size)
	}
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], crc.crc)
	return fsMeta{MD5: hex.EncodeToString(h.Sum(nil)), Parts: len(stored), CRC64NVME: upload.EncodeChecksum(sum[:])}
}

// concatParts appends the parts' bytes to f: io.Copy from a section of one
// file to another is copy_file_range on Linux, so the bytes are neither
// read into this process nor hashed again.
func concatParts(ctx context.Context, f *os.File, stored []storedPart) error {
	for _, sp := range stored {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := sp.f.Seek(partHeaderSize, io.SeekStart); err != nil {
			return err
		}
		n, err := io.Copy(f, io.LimitReader(sp.f, sp.hdr.size))
		if err == nil && n != sp.hdr.size {
			err = fmt.Errorf("part file %s ended after %d of its %d bytes", sp.f.Name(), n, sp.hdr.size)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// AbortMultipart drops the upload and its parts; an upload already gone
// is not an error.
func (b FSBackend) AbortMultipart(_ context.Context, key, id string) error {
	root, err := b.open()
	if err != nil {
		return err
	}
	defer b.release(root)
	dir, err := openUpload(root, key, id)
	if errors.Is(err, objects.ErrNoSuchUpload) {
		return nil
	}
	if err != nil {
		return err
	}
	return dropUpload(root, dir)
}

// dropUpload removes the upload in dir: its file "upload" first, so it is
// gone at once for every other request, then its parts.
func dropUpload(root *os.Root, dir string) error {
	if err := root.Remove(filepath.Join(dir, uploadInfoName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return root.RemoveAll(dir)
}

// ListMultipartUploads returns the open uploads of keys under prefix, by
// key, then start.
func (b FSBackend) ListMultipartUploads(_ context.Context, prefix string) ([]objects.MultipartUpload, error) {
	root, err := b.open()
	if err != nil {
		return nil, err
	}
	defer b.release(root)
	entries, err := fs.ReadDir(root.FS(), fsMultipartDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ups []objects.MultipartUpload
	for _, e := range entries {
		dir, err := uploadDir(e.Name())
		if err != nil {
			continue
		}
		info, err := readUploadInfo(root, dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // being created or dropped
		case err != nil:
			return nil, err
		case strings.HasPrefix(info.Key, prefix):
			ups = append(ups, objects.MultipartUpload{Key: info.Key, ID: e.Name(), Initiated: info.Initiated})
		}
	}
	slices.SortFunc(ups, func(a, b objects.MultipartUpload) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return a.Initiated.Compare(b.Initiated)
	})
	return ups, nil
}

// removeStaleUploadDirs removes upload directories without their file
// "upload" older than cutoff: what a crash left of an upload being
// created, completed or aborted. Open uploads are kept, however old: S3
// keeps them until they are aborted.
func removeStaleUploadDirs(root *os.Root, cutoff time.Time) error {
	entries, err := fs.ReadDir(root.FS(), fsMultipartDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		dir := path.Join(fsMultipartDir, e.Name())
		if _, err := root.Stat(path.Join(dir, uploadInfoName)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			if err := root.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
