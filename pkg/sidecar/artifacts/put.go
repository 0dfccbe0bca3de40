package artifacts

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
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

	"github.com/tether-dev/tether/api/names"
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
		return Result{}, &FileError{Path: rel, Permanent: true, Err: err, Hint: "rename the file or exclude it with the " + names.ExcludeAnnotation + " annotation"}
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
	if v, ok := u.VerifiedFile(rel, size, mtime); ok {
		return Result{Path: rel, Size: size, MD5: v.MD5, CRC64NVME: v.CRC64NVME, How: Unchanged}, nil
	}
	if size < smallFileSize {
		return u.uploadSmall(ctx, f, st, rel, key)
	}

	// HEAD: an object of the same size may already be the file (a restarted
	// sidecar, or a PUT whose answer was lost). Then one read of the file,
	// and no upload if the MD5 matches.
	info, err := u.client.StatObject(ctx, upload.Bucket, key, minio.StatObjectOptions{Checksum: true})
	switch {
	case err == nil && info.Size == size:
		sum, crc, err := digestsOf(f, size)
		if err != nil {
			return Result{}, err
		}
		if err := unchanged(f, st); err != nil {
			return Result{}, err
		}
		// A checksum the server reports must match too: on a store whose
		// ETags are not MD5s (SSE-KMS) the ETag never does, and the file
		// is sent again (the server then keeps one copy).
		if storedIs(info.ETag, info.ChecksumCRC64NVME, sum, crc) {
			return u.verifiedAs(rel, size, mtime, sum, crc, AlreadyPresent), nil
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Result{}, &localError{err}
		}
	case err == nil, statusOf(err) == http.StatusNotFound:
	default:
		return Result{}, fmt.Errorf("HEAD %s: %w", key, err)
	}

	// A large file whose upload stored parts before it was cut short goes
	// on after them (resume.go).
	res, err := u.resumePoint(ctx, key, size)
	if err != nil {
		return Result{}, err
	}
	prefix, err := readPrefix(f, st, res)
	if err != nil {
		return Result{}, err
	}
	// The file is checked again before its last bytes are handed to the
	// request (lastBytesGuard): a file that changed while it was read is
	// never sent whole, so the server refuses the short body and keeps
	// nothing, instead of storing a mix as the final object.
	guard := &lastBytesGuard{r: f, remaining: size, check: func() error { return unchanged(f, st) }}
	var out sent
	if prefix != nil {
		guard.remaining = size - prefix.offset
		out.md5, out.crc, err = u.putResumed(ctx, key, guard, size, prefix)
		out.resumed = prefix.offset
	} else {
		out, err = u.send(ctx, key, guard, size)
	}
	sum, crc := out.md5, out.crc
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
	r := u.verifiedAs(rel, size, mtime, sum, crc, Uploaded)
	r.Resumed = out.resumed
	return r, nil
}

// storedIs says whether a stored object (its ETag and CRC-64/NVME) is the
// file with MD5 sum and CRC crc: by its ETag, and its checksum if it has
// one; an object stored in parts, whose ETag is not an MD5, by its checksum
// alone.
func storedIs(etag, storedCRC, sum, crc string) bool {
	if upload.IsMultipartETag(trimETag(etag)) {
		return storedCRC != "" && storedCRC == crc
	}
	return strings.EqualFold(trimETag(etag), sum) && (storedCRC == "" || storedCRC == crc)
}

// verifiedAs records rel, of size and mtime, as verified with MD5 sum and
// CRC-64/NVME crc, and returns its Result.
func (u *Uploader) verifiedAs(rel string, size int64, mtime time.Time, sum, crc string, how How) Result {
	u.remember(rel, size, mtime, sum, crc)
	u.verifiedBytes.Add(size)
	return Result{Path: rel, Size: size, MD5: sum, CRC64NVME: crc, How: how}
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

// digestsOf reads exactly size bytes of r and returns their hex MD5 and
// their CRC-64/NVME (S3's form).
func digestsOf(r io.Reader, size int64) (string, string, error) {
	h, c := md5.New(), upload.NewCRC64NVME()
	n, err := io.Copy(io.MultiWriter(h, c), io.LimitReader(r, size))
	if err != nil {
		return "", "", &localError{err}
	}
	if n != size {
		return "", "", fmt.Errorf("%w (read %d of %d bytes)", errChanged, n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), upload.EncodeChecksum(c.Sum(nil)), nil
}

// put sends size bytes of body as one PUT to key and returns their MD5 and
// CRC-64/NVME, if and only if the server's ETag equals the MD5 (and the
// checksum it reports, if any, the CRC).
//
// No Content-MD5 is sent: it must precede the body, so it would need a
// second read of the file (or the whole file in memory), and the contract
// is that a file is read once. Integrity does not depend on it: the server
// computes the MD5 of what it streams to storage and answers with the stored
// object's ETag only once that ETag matched its own MD5; the sidecar
// compares that ETag with the MD5 of the bytes it actually sent, so any
// difference between what was read and what was stored fails verification.
// (Content-MD5 would only let the server refuse a corrupted body itself.)
//
// The body's CRC-64/NVME goes in an aws-chunked trailer (it is known only
// once the body was read): the server verifies it and the store keeps it,
// the verification on a store whose ETags are not MD5s. A server that
// refuses trailers (before they were taken, 501 NotImplemented) gets the
// plain body from then on.
func (u *Uploader) put(ctx context.Context, key string, body io.Reader, size int64) (string, string, error) {
	return u.putSum(ctx, key, body, size, nil, "")
}

// putSum is put; with contentMD5 and crc (the body's, computed before) they
// are sent as Content-MD5 and x-amz-checksum-crc64nvme instead of hashing
// the body on the way (uploadSmall, the manifest).
func (u *Uploader) putSum(ctx context.Context, key string, body io.Reader, size int64, contentMD5 []byte, crc string) (string, string, error) {
	src := io.LimitReader(body, size)
	if contentMD5 != nil {
		sum := hex.EncodeToString(contentMD5)
		return u.putBody(ctx, key, src, size, contentMD5, crc, func() (string, string) { return sum, crc })
	}
	h, c := md5.New(), upload.NewCRC64NVME()
	return u.putBody(ctx, key, io.TeeReader(src, io.MultiWriter(h, c)), size, nil, "", func() (string, string) {
		return hex.EncodeToString(h.Sum(nil)), upload.EncodeChecksum(c.Sum(nil))
	})
}

// putHashed is putBody for a body whose digests are computed as it is read
// (put, a resumed PUT).
func (u *Uploader) putHashed(ctx context.Context, key string, src io.Reader, size int64, digests func() (string, string)) (string, string, error) {
	return u.putBody(ctx, key, src, size, nil, "", digests)
}

// putBody sends size bytes of src as one PUT to key. contentMD5 and crc,
// if known before (the body's), are sent as Content-MD5 and
// x-amz-checksum-crc64nvme; otherwise the CRC goes in a trailer. digests
// gives, once the body was sent, the MD5 and CRC-64/NVME the object must
// have (of the whole file for a resumed PUT): the server's answer must
// match them.
func (u *Uploader) putBody(ctx context.Context, key string, src io.Reader, size int64, contentMD5 []byte, crc string, digests func() (string, string)) (string, string, error) {
	pr, actx, stop := u.stallWatched(ctx, src)
	defer stop()

	opts := minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}
	md5b64 := ""
	trailer := false
	switch {
	case contentMD5 != nil:
		md5b64 = base64.StdEncoding.EncodeToString(contentMD5)
		opts.UserMetadata = map[string]string{upload.ChecksumHeader: crc}
	case size > 0 && !u.noTrailer.Load():
		// minio-go computes it again as it sends: the trailer is what it
		// sent; the digests are checked against the server's answer below.
		opts.Checksum = minio.ChecksumCRC64NVME
		trailer = true
	}
	info, err := minio.Core{Client: u.client}.PutObject(actx, upload.Bucket, key, pr, size, md5b64, "", opts)
	if err != nil {
		if stalled(ctx, actx) {
			return "", "", fmt.Errorf("PUT %s: %w for %s", key, errStalled, u.cfg.StallTimeout)
		}
		if trailer && minio.ToErrorResponse(err).StatusCode == http.StatusNotImplemented {
			u.noTrailer.Store(true)
			u.log.Warn("the binding server refuses aws-chunked trailers (an older server): PUTs go without their checksum", "error", err)
		}
		return "", "", fmt.Errorf("PUT %s: %w", key, err)
	}
	if n := pr.n.Load(); n != size {
		return "", "", fmt.Errorf("PUT %s: %w (sent %d of %d bytes)", key, errChanged, n, size)
	}
	sum, crc := digests()
	if err := checkAnswer(key, sum, crc, info.ETag, info.ChecksumCRC64NVME); err != nil {
		return "", "", err
	}
	return sum, crc, nil
}

// checkAnswer: the server's answer must be the bytes sent (MD5 sum,
// CRC-64/NVME crc). An object stored in parts has an ETag that is not its
// MD5: its checksum, which the server must then report, verifies it.
func checkAnswer(key, sum, crc, etag, gotCRC string) error {
	if upload.IsMultipartETag(trimETag(etag)) {
		if gotCRC == "" {
			return fmt.Errorf("PUT %s: %w: %w", key, errETagMismatch, errNoChecksum)
		}
		return checkCRC(key, crc, gotCRC)
	}
	if err := checkSum(key, sum, etag); err != nil {
		return err
	}
	return checkCRC(key, crc, gotCRC)
}

// checkSum: the server's ETag must be sum, the MD5 of the bytes sent.
func checkSum(key, sum, etag string) error {
	if got := trimETag(etag); !strings.EqualFold(got, sum) {
		return fmt.Errorf("PUT %s: %w: the server answered ETag %q, the MD5 of the bytes sent is %s", key, errETagMismatch, got, sum)
	}
	return nil
}

// checkCRC: a CRC-64/NVME the server or store reports must be crc, the
// checksum of the bytes sent (a server that reports none is checked by its
// ETag alone).
func checkCRC(key, crc, got string) error {
	if got != "" && got != crc {
		return fmt.Errorf("PUT %s: %w: the answer's CRC-64/NVME is %q, that of the bytes sent %s", key, errETagMismatch, got, crc)
	}
	return nil
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
