package artifacts

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/upload"
)

// UploadFile verifies the regular file rel (slash-separated, relative to
// root) on the server: unchanged since this Uploader verified it → nothing
// is done; an object of the same size is stored → the file is read once and,
// if the ETag matches its MD5, not sent; otherwise it is sent in one PUT and
// read once, its MD5 computed as it streams. Symlinks are never followed.
// The error is a *FileError.
func (u *Uploader) UploadFile(ctx context.Context, root *os.Root, rel string) (Result, error) {
	key := u.Key(rel)
	if err := checkKey(rel, key); err != nil {
		return Result{}, &FileError{Path: rel, Permanent: true, Err: err, Hint: "rename the file or exclude it with the " + ExcludeAnnotation + " annotation"}
	}
	var res Result
	attempts, err := u.retry(ctx, rel, func(ctx context.Context, _ int) error {
		r, err := u.uploadOnce(ctx, root, rel, key)
		if err == nil {
			res = r
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}
	res.Attempts = attempts
	return res, nil
}

// checkKey refuses what the contract forbids in a key.
func checkKey(rel, key string) error {
	switch {
	case rel == "" || strings.HasPrefix(rel, "/") || strings.HasSuffix(rel, "/"):
		return fmt.Errorf("invalid relative path")
	case !utf8.ValidString(rel):
		return fmt.Errorf("the name is not valid UTF-8, which an object key must be")
	case len(key) > upload.MaxKeyLength:
		return fmt.Errorf("its object key is %d bytes long; the binding server takes at most %d", len(key), upload.MaxKeyLength)
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("the path has an empty, '.' or '..' segment")
		}
	}
	return nil
}

// openRegular opens rel under root without following a symlink: the entry
// itself must be a regular file, and the opened file must be that entry.
// os.Root keeps every access inside the root.
func openRegular(root *os.Root, rel string) (*os.File, fs.FileInfo, error) {
	name := fsPath(rel)
	lst, err := root.Lstat(name)
	if err != nil {
		return nil, nil, &localError{err}
	}
	if !lst.Mode().IsRegular() {
		return nil, nil, &localError{fmt.Errorf("not a regular file (%s); symlinks are never followed", lst.Mode().Type())}
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			err = fmt.Errorf("%w (%s)", err, permissionDetail(lst))
		}
		return nil, nil, &localError{err}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, &localError{err}
	}
	if !st.Mode().IsRegular() || !os.SameFile(lst, st) {
		f.Close()
		return nil, nil, &localError{errors.New("the file was replaced while it was opened (by a symlink or another file)")}
	}
	return f, st, nil
}

func sameVersion(a, b fs.FileInfo) bool {
	return a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

func (u *Uploader) uploadOnce(ctx context.Context, root *os.Root, rel, key string) (Result, error) {
	f, st, err := openRegular(root, rel)
	if err != nil {
		u.forget(rel)
		return Result{}, err
	}
	defer f.Close()
	size, mtime := st.Size(), st.ModTime()
	if size > upload.MaxObjectSize {
		return Result{}, &localError{TooLargeError{Path: rel, Size: size}}
	}
	if sum, ok := u.Verified(rel, size, mtime); ok {
		return Result{Path: rel, Size: size, MD5: sum, How: Unchanged}, nil
	}
	if size < smallFileSize {
		return u.uploadSmall(ctx, f, st, rel, key)
	}

	// HEAD: an object of the same size may already be the file (a restarted
	// sidecar, or a PUT whose answer was lost). Then one read of the file,
	// and no upload if the MD5 matches.
	info, err := u.client.StatObject(ctx, upload.Bucket, key, minio.StatObjectOptions{})
	switch {
	case err == nil && info.Size == size:
		sum, err := md5Of(f, size)
		if err != nil {
			return Result{}, err
		}
		if err := unchanged(f, st); err != nil {
			return Result{}, err
		}
		if strings.EqualFold(trimETag(info.ETag), sum) {
			return u.verifiedAs(rel, size, mtime, sum, AlreadyPresent), nil
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Result{}, &localError{err}
		}
	case err == nil, statusOf(err) == http.StatusNotFound:
	default:
		return Result{}, fmt.Errorf("HEAD %s: %w", key, err)
	}

	// The file is checked again before its last bytes are handed to the
	// request (lastBytesGuard): a file that changed while it was read is
	// never sent whole, so the server refuses the short body and keeps
	// nothing, instead of storing a mix as the final object.
	sum, err := u.send(ctx, key, &lastBytesGuard{r: f, remaining: size, check: func() error { return unchanged(f, st) }}, size)
	if err != nil {
		if errors.Is(err, errChanged) {
			return Result{}, fmt.Errorf("PUT %s: %w", key, errChanged)
		}
		return Result{}, err
	}
	// A change after the last check (a narrow window) is still caught here.
	if err := unchanged(f, st); err != nil {
		return Result{}, err
	}
	return u.verifiedAs(rel, size, mtime, sum, Uploaded), nil
}

// verifiedAs records rel, of size and mtime, as verified with MD5 sum, and
// returns its Result.
func (u *Uploader) verifiedAs(rel string, size int64, mtime time.Time, sum string, how How) Result {
	u.remember(rel, size, mtime, sum)
	u.verifiedBytes.Add(size)
	return Result{Path: rel, Size: size, MD5: sum, How: how}
}

func unchanged(f *os.File, st fs.FileInfo) error {
	now, err := f.Stat()
	if err != nil {
		return &localError{err}
	}
	if !sameVersion(st, now) {
		return fmt.Errorf("%w (size %d → %d)", errChanged, st.Size(), now.Size())
	}
	return nil
}

// md5Of reads exactly size bytes of r and returns their hex MD5.
func md5Of(r io.Reader, size int64) (string, error) {
	h := md5.New()
	n, err := io.Copy(h, io.LimitReader(r, size))
	if err != nil {
		return "", &localError{err}
	}
	if n != size {
		return "", fmt.Errorf("%w (read %d of %d bytes)", errChanged, n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// put sends size bytes of body as one PUT to key and returns their MD5, if
// and only if the server's ETag equals it.
//
// No Content-MD5 is sent: it must precede the body, so it would need a
// second read of the file (or the whole file in memory), and the contract
// is that a file is read once. Integrity does not depend on it: the server
// computes the MD5 of what it streams to storage and answers with the stored
// object's ETag only once that ETag matched its own MD5; the sidecar
// compares that ETag with the MD5 of the bytes it actually sent, so any
// difference between what was read and what was stored fails verification.
// (Content-MD5 would only let the server refuse a corrupted body itself.)
func (u *Uploader) put(ctx context.Context, key string, body io.Reader, size int64) (string, error) {
	return u.putSum(ctx, key, body, size, nil)
}

// putSum is put; with contentMD5 (the body's, computed before) it is sent as
// Content-MD5 instead of hashing the body on the way (uploadSmall).
func (u *Uploader) putSum(ctx context.Context, key string, body io.Reader, size int64, contentMD5 []byte) (string, error) {
	h := md5.New()
	src := io.LimitReader(body, size)
	if contentMD5 == nil {
		src = io.TeeReader(src, h)
	}
	pr, actx, stop := u.stallWatched(ctx, src)
	defer stop()

	opts := minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}
	var (
		info minio.UploadInfo
		err  error
	)
	if contentMD5 != nil {
		info, err = minio.Core{Client: u.client}.PutObject(actx, upload.Bucket, key, pr, size,
			base64.StdEncoding.EncodeToString(contentMD5), "", opts)
	} else {
		info, err = u.client.PutObject(actx, upload.Bucket, key, pr, size, opts)
	}
	if err != nil {
		if stalled(ctx, actx) {
			return "", fmt.Errorf("PUT %s: %w for %s", key, errStalled, u.cfg.StallTimeout)
		}
		return "", fmt.Errorf("PUT %s: %w", key, err)
	}
	if n := pr.n.Load(); n != size {
		return "", fmt.Errorf("PUT %s: %w (sent %d of %d bytes)", key, errChanged, n, size)
	}
	if contentMD5 != nil {
		return checkSum(key, hex.EncodeToString(contentMD5), info.ETag)
	}
	return checkETag(key, h, info.ETag)
}

func checkETag(key string, h hash.Hash, etag string) (string, error) {
	return checkSum(key, hex.EncodeToString(h.Sum(nil)), etag)
}

// checkSum: the server's ETag must be sum, the MD5 of the bytes sent.
func checkSum(key, sum, etag string) (string, error) {
	if got := trimETag(etag); !strings.EqualFold(got, sum) {
		return "", fmt.Errorf("PUT %s: %w: the server answered ETag %q, the MD5 of the bytes sent is %s", key, errETagMismatch, got, sum)
	}
	return sum, nil
}

// stallWatched wraps one PUT's body: its reads are counted, and a body that
// makes no progress for StallTimeout (the server or the network stopped
// taking bytes) ends the attempt, cancelling actx with errStalled;
// ResponseHeaderTimeout covers the wait for the answer. The request must be
// made with actx; stop ends the watch.
func (u *Uploader) stallWatched(ctx context.Context, body io.Reader) (pr *progressReader, actx context.Context, stop func()) {
	pr = &progressReader{r: body}
	pr.touch()
	actx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go u.watchStall(pr, cancel, done)
	return pr, actx, func() {
		close(done)
		cancel(nil)
	}
}

// stalled: a request made with stallWatched's actx ended because its body
// stalled (and not because ctx ended).
func stalled(ctx, actx context.Context) bool {
	return ctx.Err() == nil && errors.Is(context.Cause(actx), errStalled)
}

func (u *Uploader) watchStall(pr *progressReader, cancel context.CancelCauseFunc, done <-chan struct{}) {
	tick := max(u.cfg.StallTimeout/4, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if pr.finished.Load() {
				return // the wait for the answer is ResponseHeaderTimeout's
			}
			if time.Since(time.Unix(0, pr.last.Load())) > u.cfg.StallTimeout {
				cancel(errStalled)
				return
			}
		}
	}
}

// progressReader counts what was read and when.
type progressReader struct {
	r        io.Reader
	n        atomic.Int64
	last     atomic.Int64 // unix nanoseconds of the last progress
	finished atomic.Bool
}

func (p *progressReader) touch() { p.last.Store(time.Now().UnixNano()) }

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n.Add(int64(n))
	p.touch()
	if err != nil {
		p.finished.Store(true)
	}
	return n, err
}

func trimETag(etag string) string {
	return strings.ToLower(strings.Trim(strings.TrimPrefix(etag, "W/"), `"`))
}
