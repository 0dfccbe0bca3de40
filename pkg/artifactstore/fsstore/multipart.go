package fsstore

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// Multipart uploads on the file system. An open upload is the directory
// .tether/multipart/<id> (never a key: keys under .tether are refused and
// List skips it), holding the file "upload" (its key and start, JSON) and
// one file per stored part, named by its number: a header of
// partHeaderSize bytes (the part's size, MD5 and CRC-64/NVME, computed in
// process as it was written), then its bytes. A part is written to a
// temporary file, fsynced and renamed into the directory, so a part whose
// body failed is never listed and one stored again replaces the one
// before. The id is 16 random bytes in hex: unguessable, and checked
// before it names a path.
//
// The completion never reads the data: it joins the parts' CRCs into the
// object's (crc64combine.go) and checks the claimed one before it writes
// anything, then concatenates the parts into a temporary file with
// io.Copy between files (copy_file_range on Linux: the bytes stay in the
// kernel) and renames it into place with its metadata (ETag
// upload.MultipartETag of the parts' MD5s, and the CRC-64/NVME).

var _ objects.Multiparter = FSBackend{}

const (
	fsMultipartDir = fsReserved + "/multipart"
	uploadInfoName = "upload"
	// partHeaderSize keeps a part's bytes aligned for direct writes.
	partHeaderSize = directIOAlign
	partMagic      = "tether-part\x00\x00\x00\x00\x01"
	partHeaderUsed = len(partMagic) + 8 + md5.Size + 8
)

// uploadInfo is an open upload's file "upload".
type uploadInfo struct {
	Key       string    `json:"key"`
	Initiated time.Time `json:"initiated"`
}

// partHeader describes a stored part.
type partHeader struct {
	size int64
	md5  [md5.Size]byte
	crc  uint64
}

func (h partHeader) marshal() []byte {
	b := make([]byte, partHeaderUsed)
	n := copy(b, partMagic)
	binary.LittleEndian.PutUint64(b[n:], uint64(h.size))
	n += 8 + copy(b[n+8:], h.md5[:])
	binary.LittleEndian.PutUint64(b[n:], h.crc)
	return b
}

// readPartHeader reads the header of the part file f.
func readPartHeader(f *os.File) (partHeader, error) {
	b := make([]byte, partHeaderUsed)
	if _, err := f.ReadAt(b, 0); err != nil {
		return partHeader{}, fmt.Errorf("reading the header of part file %s: %w", f.Name(), err)
	}
	if string(b[:len(partMagic)]) != partMagic {
		return partHeader{}, fmt.Errorf("part file %s has no part header", f.Name())
	}
	n := len(partMagic)
	h := partHeader{size: int64(binary.LittleEndian.Uint64(b[n:]))}
	n += 8 + copy(h.md5[:], b[n+8:])
	h.crc = binary.LittleEndian.Uint64(b[n:])
	if fi, err := f.Stat(); err != nil || fi.Size() != partHeaderSize+h.size {
		return partHeader{}, fmt.Errorf("part file %s does not hold the %d bytes its header names (%v)", f.Name(), h.size, err)
	}
	return h, nil
}

// MultipartCapable is true: the backend computes every part's
// CRC-64/NVME itself and checks the claimed one at completion.
func (FSBackend) MultipartCapable() bool { return true }

// uploadDir is upload id's directory; an id this backend cannot have made
// is no upload.
func uploadDir(id string) (string, error) {
	if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w: %q is not an upload id of this store", objects.ErrNoSuchUpload, id)
	}
	return filepath.Join(filepath.FromSlash(fsMultipartDir), id), nil
}

// openUpload returns the directory of upload id of key.
func openUpload(root *os.Root, key, id string) (string, error) {
	dir, err := uploadDir(id)
	if err != nil {
		return "", err
	}
	info, err := readUploadInfo(root, dir)
	if errors.Is(err, fs.ErrNotExist) || err == nil && info.Key != key {
		return "", fmt.Errorf("%w: no upload %s of %s", objects.ErrNoSuchUpload, id, key)
	}
	return dir, err
}

func readUploadInfo(root *os.Root, dir string) (uploadInfo, error) {
	b, err := root.ReadFile(filepath.Join(dir, uploadInfoName))
	if err != nil {
		return uploadInfo{}, err
	}
	var info uploadInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return uploadInfo{}, fmt.Errorf("upload %s: %w", dir, err)
	}
	return info, nil
}

// CreateMultipart starts an upload to key.
func (b FSBackend) CreateMultipart(_ context.Context, key string) (string, error) {
	if _, err := fsPath(key); err != nil {
		return "", err
	}
	root, err := b.open()
	if err != nil {
		return "", err
	}
	defer b.release(root)
	info, err := json.Marshal(uploadInfo{Key: key, Initiated: time.Now().UTC()})
	if err != nil {
		return "", err
	}
	tmp, f, err := createTemp(root)
	if err != nil {
		return "", err
	}
	_, err = f.Write(info)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.MkdirAll(filepath.FromSlash(fsMultipartDir), 0o755)
	}
	for err == nil {
		var r [16]byte
		_, _ = rand.Read(r[:])
		id := hex.EncodeToString(r[:])
		dir, _ := uploadDir(id)
		if err = root.Mkdir(dir, 0o755); errors.Is(err, fs.ErrExist) {
			err = nil
			continue
		}
		if err == nil {
			err = root.Rename(tmp, filepath.Join(dir, uploadInfoName))
		}
		if err == nil {
			return id, nil
		}
	}
	_ = root.Remove(tmp)
	return "", err
}

// PutPart stores size bytes of body as part n of upload id, computing its
// MD5 (its ETag) and CRC-64/NVME as it is written.
func (b FSBackend) PutPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (objects.Part, error) {
	if n < 1 || n > upload.MaxParts {
		return objects.Part{}, fmt.Errorf("part number %d: parts are numbered 1 to %d", n, upload.MaxParts)
	}
	if size < 0 || size > upload.MaxPartSize {
		return objects.Part{}, fmt.Errorf("a part of %d bytes: parts hold 0 to %d bytes (5 GiB)", size, upload.MaxPartSize)
	}
	root, err := b.open()
	if err != nil {
		return objects.Part{}, err
	}
	defer b.release(root)
	dir, err := openUpload(root, key, id)
	if err != nil {
		return objects.Part{}, err
	}
	h, crc := md5.New(), upload.NewCRC64NVME()
	tmp, f, err := writeBody(ctx, root, body, size, partHeaderSize, io.MultiWriter(h, crc))
	if err != nil {
		return objects.Part{}, err
	}
	defer f.Close()
	hdr := partHeader{size: size, crc: crc.Sum64()}
	h.Sum(hdr.md5[:0])
	err = clearDirect(f)
	if err == nil {
		_, err = f.WriteAt(hdr.marshal(), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		// Not renameInto: a directory gone (the upload aborted) stays gone.
		err = root.Rename(tmp, filepath.Join(dir, strconv.Itoa(n)))
		if errors.Is(err, fs.ErrNotExist) {
			err = fmt.Errorf("%w: upload %s of %s ended while its part %d was written", objects.ErrNoSuchUpload, id, key, n)
		}
	}
	if err != nil {
		_ = root.Remove(tmp)
		return objects.Part{}, err
	}
	return objects.Part{Number: n, Size: size, ETag: hex.EncodeToString(hdr.md5[:])}, nil
}

// ListParts returns the upload's stored parts in part order.
func (b FSBackend) ListParts(_ context.Context, key, id string) ([]objects.Part, error) {
	root, err := b.open()
	if err != nil {
		return nil, err
	}
	defer b.release(root)
	dir, err := openUpload(root, key, id)
	if err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(root.FS(), filepath.ToSlash(dir))
	if err != nil {
		return nil, err
	}
	var parts []objects.Part
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 1 || n > upload.MaxParts || strconv.Itoa(n) != e.Name() {
			continue
		}
		p, err := openPart(root, dir, n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // replaced or dropped meanwhile
		}
		if err != nil {
			return nil, err
		}
		_ = p.f.Close()
		parts = append(parts, p.part(n))
	}
	slices.SortFunc(parts, func(a, b objects.Part) int { return a.Number - b.Number })
	return parts, nil
}

// storedPart is a part file, open, and its header.
type storedPart struct {
	f   *os.File
	hdr partHeader
}

func (p storedPart) part(n int) objects.Part {
	return objects.Part{Number: n, Size: p.hdr.size, ETag: hex.EncodeToString(p.hdr.md5[:])}
}

// openPart opens part n of the upload in dir.
func openPart(root *os.Root, dir string, n int) (storedPart, error) {
	f, err := root.Open(filepath.Join(dir, strconv.Itoa(n)))
	if err != nil {
		return storedPart{}, err
	}
	hdr, err := readPartHeader(f)
	if err != nil {
		_ = f.Close()
		return storedPart{}, err
	}
	return storedPart{f: f, hdr: hdr}, nil
}
