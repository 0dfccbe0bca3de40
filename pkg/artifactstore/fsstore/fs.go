package fsstore

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// FSBackend stores objects as files under Root: key <job-id>/a/b.bin is the
// file Root/<job-id>/a/b.bin, so the directory reads like the bucket.
//
// Every object's metadata records its MD5 (the ETag) with the data file's
// size, modification time and inode: in the data file's extended attribute
// user.tether.meta, or, on a file system without user extended attributes,
// in a small metadata file .tether/meta/<key> (stores written before the
// attribute was used have those too, and are read as they are). The backend
// keeps its own data under Root/.tether (a key may not start with
// ".tether/"); temporary files are in .tether/tmp, the open multipart
// uploads in .tether/multipart (multipart.go).
//
// Put writes a temporary file while computing its MD5, records the metadata,
// fsyncs the file and renames it into place, then fsyncs the directory: a
// partial object is never visible under its key. Head reads the metadata
// instead of the file; if the metadata does not describe the file (a file
// changed by hand, a crash between a metadata file's rename and the data
// file's), Head computes the MD5 from the file and records it again.
//
// All access goes through an os.Root, so no key or symbolic link reaches
// outside Root. Root, .tether/tmp and the objects must be on one file system.
// A key cannot name both an object and a directory ("a/b" and "a/b/c"):
// such a PUT fails with objects.ErrKeyConflict.
//
// The zero value with Root set opens Root for every operation; NewFSBackend
// opens it once, which a server storing many small objects wants.
type FSBackend struct {
	Root string

	// metaFiles: metadata files even where extended attributes work (tests
	// of the layout of file systems without them, and of older stores).
	metaFiles bool
	// held is Root opened once (NewFSBackend), shared by copies.
	held *os.Root
}

// NewFSBackend returns the FSBackend of the directory root, created if
// missing and kept open: every operation resolves its key from the open
// directory instead of opening root's path first (test/performance/sync: that open is
// a tenth of a small object's PUT). The directory must stay where it is
// while the backend is used: a root removed and created again is not seen.
func NewFSBackend(root string) (FSBackend, error) {
	b := FSBackend{Root: root}
	r, err := b.open()
	if err != nil {
		return FSBackend{}, err
	}
	b.held = r
	return b, nil
}

// Close releases what NewFSBackend holds.
func (b FSBackend) Close() error {
	if b.held == nil {
		return nil
	}
	return b.held.Close()
}

var _ upload.Backend = FSBackend{}
var _ objects.Stater = FSBackend{}

const (
	fsReserved = upload.ReservedDir
	fsMetaDir  = fsReserved + "/meta"
	fsTmpDir   = fsReserved + "/tmp"
)

// fsFingerprint identifies the data file a metadata file describes.
type fsFingerprint struct {
	Size    int64  `json:"size"`
	ModTime int64  `json:"mtime"`
	Inode   uint64 `json:"ino,omitempty"`
}

func fingerprint(fi os.FileInfo) fsFingerprint {
	return fsFingerprint{Size: fi.Size(), ModTime: fi.ModTime().UnixNano(), Inode: inode(fi)}
}

// fsPath maps a key to its path relative to Root.
func fsPath(key string) (string, error) {
	if key == "" || strings.IndexByte(key, 0) >= 0 || objects.CheckSegments(key) != "" {
		return "", fmt.Errorf("%w: %q is not a clean relative path", objects.ErrInvalidKey, key)
	}
	if first, _, _ := strings.Cut(key, "/"); first == fsReserved {
		return "", fmt.Errorf("%w: keys starting with %q are the file system backend's own", objects.ErrInvalidKey, fsReserved+"/")
	}
	for seg := range strings.SplitSeq(key, "/") {
		if len(seg) > 255 {
			return "", fmt.Errorf("%w: a path segment is %d bytes; file names are at most 255", objects.ErrInvalidKey, len(seg))
		}
	}
	return filepath.FromSlash(key), nil
}

func metaPath(p string) string { return filepath.Join(filepath.FromSlash(fsMetaDir), p) }

func (b FSBackend) open() (*os.Root, error) {
	if b.held != nil {
		return b.held, nil
	}
	if b.Root == "" {
		return nil, errors.New("FSBackend.Root is empty")
	}
	root, err := os.OpenRoot(b.Root)
	if !errors.Is(err, fs.ErrNotExist) {
		return root, err
	}
	if err := os.MkdirAll(b.Root, 0o755); err != nil {
		return nil, err
	}
	return os.OpenRoot(b.Root)
}

// release closes a root open returned, unless it is the held one.
func (b FSBackend) release(root *os.Root) {
	if root != b.held {
		_ = root.Close()
	}
}

// fsError maps file system errors to the backend's.
func fsError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w: %v", objects.ErrKeyConflict, err)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("%w: %v", objects.ErrInvalidKey, err)
	}
	return err
}

// createTemp creates an empty temporary file in .tether/tmp, creating the
// directory the first time; flag is added to the open's (O_DIRECT).
func createTemp(root *os.Root, flag ...int) (string, *os.File, error) {
	extra := 0
	for _, f := range flag {
		extra |= f
	}
	for made := false; ; {
		var r [12]byte
		_, _ = rand.Read(r[:])
		name := filepath.Join(filepath.FromSlash(fsTmpDir), hex.EncodeToString(r[:])+".part")
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|extra, 0o644)
		switch {
		case errors.Is(err, fs.ErrExist):
			continue
		case errors.Is(err, fs.ErrNotExist) && !made:
			if err := root.MkdirAll(filepath.FromSlash(fsTmpDir), 0o755); err != nil {
				return "", nil, err
			}
			made = true
			continue
		}
		return name, f, err
	}
}

// ctxReader stops reading when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// copyBufferSize is the chunk a PUT's body is read, hashed and written in
// (test/performance/upload: 16 KiB chunks cost a write(2) per TLS record; 256 KiB
// and larger buffers cost the same CPU as 1 MiB ones).
const copyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

var _ objects.BodyHasher = FSBackend{}

// HashesBody marks FSBackend as an objects.BodyHasher: Put's ETag is the
// MD5 of exactly the bytes it read and wrote.
func (FSBackend) HashesBody() {}

// Put stores exactly size bytes of body under key.
func (b FSBackend) Put(ctx context.Context, key string, body io.Reader, size int64) (upload.ObjectInfo, error) {
	p, err := fsPath(key)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	root, err := b.open()
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	defer b.release(root)
	h := md5.New()
	tmp, f, err := writeBody(ctx, root, body, size, 0, h)
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
	meta, inXattr, err := b.finishTemp(f, h)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	if err := commit(root, tmp, p, meta, !inXattr); err != nil {
		return upload.ObjectInfo{}, err
	}
	committed = true
	return upload.ObjectInfo{Size: meta.Size, ETag: meta.MD5}, nil
}

// writeBody writes exactly size bytes of body to a new temporary file,
// from offset on, and into h as they are written: directly (O_DIRECT) if
// the body is large, offset aligned and the file system takes it. On
// success the caller closes f and removes tmp unless it renamed it.
func writeBody(ctx context.Context, root *os.Root, body io.Reader, size, offset int64, h io.Writer) (tmp string, f *os.File, err error) {
	direct := haveDirectIO && size >= directIOMinSize && offset%directIOAlign == 0
	if direct {
		tmp, f, err = createTemp(root, oDirect)
		// A file system without direct I/O (tmpfs) refuses the flag.
		direct = err == nil
	}
	if !direct {
		tmp, f, err = createTemp(root)
	}
	if err != nil {
		return "", nil, err
	}
	n, err := f.Seek(offset, io.SeekStart)
	if err == nil {
		src := io.LimitReader(ctxReader{ctx, body}, size+1)
		if direct {
			n, err = copyDirect(f, src, h)
		} else {
			buf := copyBuffers.Get().(*[]byte)
			n, err = io.CopyBuffer(io.MultiWriter(f, h), src, *buf)
			copyBuffers.Put(buf)
		}
	}
	if err == nil && n != size {
		err = fmt.Errorf("the body has %d bytes, not the %d announced", n, size)
	}
	if err != nil {
		_ = f.Close()
		_ = root.Remove(tmp)
		return "", nil, err
	}
	return tmp, f, nil
}

// finishTemp records the metadata of a written temporary file on it (if the
// file system takes extended attributes: inXattr) and fsyncs it.
func (b FSBackend) finishTemp(f *os.File, h hash.Hash) (meta fsMeta, inXattr bool, err error) {
	return b.recordTemp(f, fsMeta{MD5: hex.EncodeToString(h.Sum(nil))})
}

// recordTemp records meta, with the fingerprint of the written temporary
// file f, on f (if the file system takes extended attributes: inXattr) and
// fsyncs it.
func (b FSBackend) recordTemp(f *os.File, meta fsMeta) (_ fsMeta, inXattr bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return fsMeta{}, false, err
	}
	// Setting an extended attribute changes the ctime, not the mtime the
	// fingerprint holds.
	meta.fsFingerprint = fingerprint(fi)
	switch err := b.setXattr(f, meta); {
	case err == nil:
		inXattr = true
	case !errors.Is(err, errNoXattr):
		return fsMeta{}, false, err
	}
	if err := f.Sync(); err != nil {
		return fsMeta{}, false, err
	}
	return meta, inXattr, nil
}

// commit moves the temporary file tmp to p. With metaFile, the metadata is
// written to a metadata file first, so a visible object has its metadata
// unless a crash came between the two renames (which Head detects by the
// fingerprint).
func commit(root *os.Root, tmp, p string, meta fsMeta, metaFile bool) error {
	if metaFile {
		if err := writeMeta(root, p, meta); err != nil {
			return err
		}
	}
	if err := renameInto(root, tmp, p); err != nil {
		return err
	}
	if d, err := root.Open(filepath.Dir(p)); err == nil {
		err = d.Sync()
		_ = d.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// renameInto renames from to to, creating to's directory if it is missing.
// A concurrent Delete may remove an empty directory between the two: then
// it retries.
func renameInto(root *os.Root, from, to string) error {
	for attempt := 0; ; attempt++ {
		err := root.Rename(from, to)
		if !errors.Is(err, fs.ErrNotExist) || attempt == 5 {
			return fsError(err)
		}
		if err := root.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return fsError(err)
		}
	}
}

// openObject opens the data file of p; a missing file, a directory or
// anything else that is not a regular file is ErrNotFound.
func openObject(root *os.Root, p string) (*os.File, os.FileInfo, error) {
	f, err := root.Open(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil, upload.ErrNotFound
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = upload.ErrNotFound
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// objectMeta returns the metadata of the open data file f (inXattr: found
// in or recorded on its extended attribute), computing and recording it if
// the stored metadata does not describe f.
func (b FSBackend) objectMeta(root *os.Root, p string, f *os.File, fi os.FileInfo) (m fsMeta, inXattr bool, err error) {
	fp := fingerprint(fi)
	if m, ok := metaFromXattr(f); ok && m.fsFingerprint == fp && len(m.MD5) == 32 {
		return m, true, nil
	}
	if m, err := readMeta(root, p); err == nil && m.fsFingerprint == fp && len(m.MD5) == 32 {
		return m, false, nil
	}
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return fsMeta{}, false, err
	}
	m = fsMeta{MD5: hex.EncodeToString(h.Sum(nil)), fsFingerprint: fp}
	// Best effort: the next Head computes again.
	if fi2, err := f.Stat(); err == nil && fingerprint(fi2) == fp {
		if b.setXattr(f, m) == nil {
			return m, true, nil
		}
		_ = writeMeta(root, p, m)
	}
	return m, false, nil
}

// Head returns the object's size and ETag.
func (b FSBackend) Head(ctx context.Context, key string) (upload.ObjectInfo, error) {
	info, _, err := b.Stat(ctx, key)
	return info, err
}

// Stat returns the object's size, ETag and modification time.
func (b FSBackend) Stat(_ context.Context, key string) (upload.ObjectInfo, time.Time, error) {
	p, err := fsPath(key)
	if err != nil {
		return upload.ObjectInfo{}, time.Time{}, err
	}
	root, err := b.open()
	if err != nil {
		return upload.ObjectInfo{}, time.Time{}, err
	}
	defer b.release(root)
	f, fi, err := openObject(root, p)
	if err != nil {
		return upload.ObjectInfo{}, time.Time{}, err
	}
	defer f.Close()
	m, _, err := b.objectMeta(root, p, f, fi)
	if err != nil {
		return upload.ObjectInfo{}, time.Time{}, err
	}
	return m.info(fi), fi.ModTime(), nil
}

// Copy replaces dst with src: a hard link when the file system allows it
// (objects are never written in place, so sharing the file is safe), else a
// copy whose MD5 is checked against src's.
func (b FSBackend) Copy(ctx context.Context, src, dst string) error {
	sp, err := fsPath(src)
	if err != nil {
		return err
	}
	dp, err := fsPath(dst)
	if err != nil {
		return err
	}
	root, err := b.open()
	if err != nil {
		return err
	}
	defer b.release(root)
	f, fi, err := openObject(root, sp)
	if err != nil {
		return err
	}
	defer f.Close()
	meta, inXattr, err := b.objectMeta(root, sp, f, fi)
	if err != nil {
		return err
	}
	// Link to a temporary name, then rename over dst like Put does.
	tmp, tf, err := createTemp(root)
	if err != nil {
		return err
	}
	_ = tf.Close()
	_ = root.Remove(tmp)
	if err := root.Link(sp, tmp); err == nil {
		if lfi, err := root.Stat(tmp); err == nil && os.SameFile(lfi, fi) {
			// The link shares the inode and so its extended attribute.
			if err := commit(root, tmp, dp, meta, !inXattr); err != nil {
				_ = root.Remove(tmp)
				return err
			}
			return nil
		}
		// src was replaced since it was opened: copy the opened file.
		_ = root.Remove(tmp)
	}
	return b.copyData(ctx, root, f, meta, src, dp)
}

// copyData copies the open data file f of src, whose metadata is meta, to
// dp, checking the copy as it is made: by its MD5, or for an object stored
// in parts by its CRC-64/NVME (the metadata's MD5 is then not the data's).
func (b FSBackend) copyData(ctx context.Context, root *os.Root, f *os.File, meta fsMeta, src, dp string) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tmp, tf, err := createTemp(root)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		_ = tf.Close()
		if !committed {
			_ = root.Remove(tmp)
		}
	}()
	h, crc := md5.New(), upload.NewCRC64NVME()
	if _, err := io.Copy(io.MultiWriter(tf, h, crc), ctxReader{ctx, f}); err != nil {
		return err
	}
	cmeta := fsMeta{MD5: hex.EncodeToString(h.Sum(nil))}
	if meta.Parts > 0 {
		if got := upload.EncodeChecksum(crc.Sum(nil)); got != meta.CRC64NVME {
			return fmt.Errorf("copying %s: the copy's CRC-64/NVME %s differs from the source's %s", src, got, meta.CRC64NVME)
		}
		cmeta = fsMeta{MD5: meta.MD5, Parts: meta.Parts, CRC64NVME: meta.CRC64NVME}
	} else if cmeta.MD5 != meta.MD5 {
		return fmt.Errorf("copying %s: the copy's MD5 %s differs from the source's %s", src, cmeta.MD5, meta.MD5)
	}
	cmeta, cInXattr, err := b.recordTemp(tf, cmeta)
	if err != nil {
		return err
	}
	if cmeta.Size != meta.Size {
		return fmt.Errorf("copying %s: the copy has %d bytes, the source %d", src, cmeta.Size, meta.Size)
	}
	if err := commit(root, tmp, dp, cmeta, !cInXattr); err != nil {
		return err
	}
	committed = true
	return nil
}

// Delete removes the object (a missing object is not an error) and the
// directories it leaves empty.
func (b FSBackend) Delete(_ context.Context, key string) error {
	p, err := fsPath(key)
	if err != nil {
		return err
	}
	root, err := b.open()
	if err != nil {
		return err
	}
	defer b.release(root)
	fi, err := root.Lstat(p)
	switch {
	case err == nil && fi.IsDir():
		return nil // a directory of other objects, not an object
	case err == nil:
		if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return err
	}
	if err := root.Remove(metaPath(p)); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return err
	}
	prune(root, filepath.Dir(p), ".")
	prune(root, filepath.Dir(metaPath(p)), filepath.FromSlash(fsMetaDir))
	return nil
}

// prune removes dir and its parents up to (not including) stop while they
// are empty.
func prune(root *os.Root, dir, stop string) {
	for d := dir; d != "." && d != stop && d != string(filepath.Separator); d = filepath.Dir(d) {
		if root.Remove(d) != nil {
			return
		}
	}
}

// List returns the keys starting with prefix, sorted.
func (b FSBackend) List(_ context.Context, prefix string) ([]string, error) {
	if strings.IndexByte(prefix, 0) >= 0 {
		return nil, fmt.Errorf("%w: prefix contains NUL", objects.ErrInvalidKey)
	}
	dir := "."
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dir = prefix[:i]
		if objects.CheckSegments(dir) != "" {
			return nil, fmt.Errorf("%w: prefix %q is not a clean relative path", objects.ErrInvalidKey, prefix)
		}
	}
	if first, _, _ := strings.Cut(dir, "/"); first == fsReserved {
		return nil, nil
	}
	root, err := b.open()
	if err != nil {
		return nil, err
	}
	defer b.release(root)
	var keys []string
	err = fs.WalkDir(root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() {
			if p == fsReserved || p != dir && !strings.HasPrefix(p+"/", prefix) && !strings.HasPrefix(prefix, p+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && strings.HasPrefix(p, prefix) {
			keys = append(keys, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return keys, nil
}

// RemoveStaleTemp removes temporary files older than age, left behind by a
// process that crashed while writing, and what a crash left of a
// multipart upload's directory (open uploads stay until aborted).
func (b FSBackend) RemoveStaleTemp(age time.Duration) error {
	root, err := b.open()
	if err != nil {
		return err
	}
	defer b.release(root)
	cutoff := time.Now().Add(-age)
	errs := []error{removeStaleUploadDirs(root, cutoff)}
	entries, err := fs.ReadDir(root.FS(), fsTmpDir)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.Join(errs...)
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			if err := root.Remove(path.Join(fsTmpDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
