package artifacts

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
	"github.com/tether-dev/tether/pkg/upload"
)

// Defaults of UploaderConfig.
const (
	DefaultMaxAttempts    = 5
	DefaultBackoffInitial = 250 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
	DefaultStallTimeout   = time.Minute
)

const (
	// maxKeyLength is the longest key the binding server accepts (bytes):
	// S3's 1024 less room for the server's pending prefix
	// "<job-id>/.tether/pending/" (store.MaxKeyLength).
	maxKeyLength = 1024 - len(upload.ReservedDir+"/pending/")
	// expectContinueMin: from this body size on, a PUT asks for
	// "100-continue", so a refusal (401/403, checked before the body is read)
	// costs a round trip instead of the whole body.
	expectContinueMin = 64 << 10
	// responseHeaderTimeout bounds the wait for the answer once a body is sent
	// (the server checks the stored object's ETag before it answers).
	responseHeaderTimeout = 2 * time.Minute
	dialTimeout           = 10 * time.Second
)

// UploaderConfig configures an Uploader. ServerURL, JobID and TokenFile are
// required.
type UploaderConfig struct {
	// ServerURL is the binding server's https URL (TETHER_SERVER_URL); the
	// artifact endpoint is path-style on the same listener, so only its
	// host:port is used and it must have no path.
	ServerURL string
	// JobID prefixes every key: <job-id>/<path>.
	JobID string
	// TokenFile holds the job's token. It is read again for every request,
	// so a rotated token is picked up; the token is only ever put in the
	// TokenHeader header and never logged or put in an error.
	TokenFile string
	// CAFile holds the PEM bundle that verifies the server; it is read again
	// for every new connection. Empty means the system roots.
	CAFile string

	// MaxAttempts bounds the attempts per file (transient failures only;
	// a permanent one is never retried); 0 means DefaultMaxAttempts.
	MaxAttempts int
	// BackoffInitial and BackoffMax shape the delay between attempts
	// (exponential, full jitter); 0 means the defaults.
	BackoffInitial, BackoffMax time.Duration
	// StallTimeout abandons an attempt whose body has not progressed for
	// this long (a transient failure); 0 means DefaultStallTimeout.
	StallTimeout time.Duration

	// Logger receives debug logs of retries; nil discards them.
	Logger *slog.Logger
	// WrapTransport, if set, wraps the HTTP transport below the layer that
	// adds the token (tests count, inspect or break requests with it).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Uploader puts one file as one verified PUT. It is safe for concurrent use.
//
// A file is verified only when the server's ETag equals the MD5 the
// Uploader computed over the very bytes it sent, while sending them; nothing
// else ever counts as verified.
type Uploader struct {
	cfg    UploaderConfig
	log    *slog.Logger
	client *minio.Client

	mu       sync.Mutex
	verified map[string]verifiedFile // by relative path

	verifiedBytes atomic.Int64

	ca      *credentials.CA
	backoff *credentials.Backoff
}

// verifiedFile is what the Uploader knows of a file it verified: while its
// size and mtime are unchanged it is neither read nor sent again.
type verifiedFile struct {
	size  int64
	mtime time.Time
	md5   string
}

// How says how a file came to be verified.
type How string

const (
	// Uploaded: sent, and the server's ETag matched.
	Uploaded How = "uploaded"
	// AlreadyPresent: the stored object had the same size and its ETag
	// matched the local MD5 (the file was read, not sent).
	AlreadyPresent How = "present"
	// Unchanged: verified earlier by this process, size and mtime unchanged
	// since (the file was neither read nor sent).
	Unchanged How = "unchanged"
)

// Result describes a verified file.
type Result struct {
	Path string
	Size int64
	// MD5 is the lowercase hex MD5 of the content, equal to the stored ETag.
	MD5      string
	How      How
	Attempts int
}

// FileError says why a file is not verified and what to do about it.
type FileError struct {
	// Path is relative to the artifact directory ("" for the manifest).
	Path string
	// Attempts is how many attempts were made (0: none, e.g. a file refused
	// before any request).
	Attempts int
	// Permanent reports that retrying the same request cannot help.
	Permanent bool
	Err       error
	// Hint says what to do.
	Hint string
}

func (e *FileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q: ", e.Path)
	switch {
	case e.Attempts > 1:
		fmt.Fprintf(&b, "not verified after %d attempts: ", e.Attempts)
	case e.Attempts == 1:
		b.WriteString("not verified: ")
	default:
		b.WriteString("not uploaded: ")
	}
	b.WriteString(e.Err.Error())
	if e.Hint != "" {
		b.WriteString("; " + e.Hint)
	}
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }

// NewUploader checks cfg and returns an Uploader. It makes no request.
func NewUploader(cfg UploaderConfig) (*Uploader, error) {
	u, err := url.Parse(cfg.ServerURL)
	switch {
	case cfg.ServerURL == "":
		return nil, errors.New("uploader: ServerURL is required")
	case err != nil:
		return nil, fmt.Errorf("uploader: ServerURL: %w", err)
	case u.Scheme != "https":
		// The token must never cross the network in clear text.
		return nil, fmt.Errorf("uploader: ServerURL %q: scheme must be https", cfg.ServerURL)
	case u.Host == "":
		return nil, fmt.Errorf("uploader: ServerURL %q has no host", cfg.ServerURL)
	case u.Path != "" && u.Path != "/":
		// minio-go endpoints are host:port; the contract puts the bucket at
		// the listener's root.
		return nil, fmt.Errorf("uploader: ServerURL %q: the artifact endpoint is path-style at the server's root; a path prefix is not supported", cfg.ServerURL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("uploader: ServerURL %q must not carry user info, a query or a fragment", cfg.ServerURL)
	case cfg.TokenFile == "":
		return nil, errors.New("uploader: TokenFile is required")
	case !validJobID(cfg.JobID):
		return nil, fmt.Errorf("uploader: JobID %q must be a non-empty single path segment", cfg.JobID)
	case cfg.MaxAttempts < 0 || cfg.BackoffInitial < 0 || cfg.BackoffMax < 0 || cfg.StallTimeout < 0:
		return nil, errors.New("uploader: negative MaxAttempts, backoff or StallTimeout")
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.BackoffInitial == 0 {
		cfg.BackoffInitial = DefaultBackoffInitial
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	cfg.BackoffMax = max(cfg.BackoffMax, cfg.BackoffInitial)
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	up := &Uploader{cfg: cfg, log: cfg.Logger, verified: map[string]verifiedFile{},
		ca: credentials.NewCA(cfg.CAFile), backoff: credentials.NewBackoff(cfg.BackoffInitial, cfg.BackoffMax)}
	if up.log == nil {
		up.log = slog.New(slog.DiscardHandler)
	}

	tr := &http.Transport{
		Proxy:                 nil, // the binding server is in the cluster
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		DialTLSContext:        up.dialTLS,
		ResponseHeaderTimeout: responseHeaderTimeout,
		ExpectContinueTimeout: 2 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
	}
	var rt http.RoundTripper = tr
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(rt)
	}
	rt = &tokenTransport{file: cfg.TokenFile, next: rt}

	client, err := minio.New(u.Host, &minio.Options{
		// Anonymous: requests are not SigV4-signed; the token header is
		// the authentication (docs/artifacts.md).
		Creds:        miniocreds.NewStatic("", "", "", miniocreds.SignatureAnonymous),
		Secure:       true,
		Transport:    rt,
		Region:       "us-east-1", // set: no GetBucketLocation request
		BucketLookup: minio.BucketLookupPath,
		// The Uploader retries (it must re-read the file to retry a PUT
		// anyway: the body is a one-pass stream).
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("uploader: %w", err)
	}
	up.client = client
	return up, nil
}

func validJobID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\\") && utf8.ValidString(id)
}

// Key is the object key of a path relative to the artifact directory.
func (u *Uploader) Key(rel string) string { return u.cfg.JobID + "/" + rel }

// VerifiedBytes is the total size of the files this Uploader has verified,
// whether it sent them or found them already stored (each verification
// counts once; a file verified unchanged again does not count again). The
// manifest is not counted.
func (u *Uploader) VerifiedBytes() int64 { return u.verifiedBytes.Load() }

// Verified returns what the Uploader knows verified for rel, if its size
// and mtime are still size and mtime.
func (u *Uploader) Verified(rel string, size int64, mtime time.Time) (md5hex string, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.verified[rel]
	if !ok || v.size != size || !v.mtime.Equal(mtime) {
		return "", false
	}
	return v.md5, true
}

func (u *Uploader) remember(rel string, size int64, mtime time.Time, sum string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.verified[rel] = verifiedFile{size: size, mtime: mtime, md5: sum}
}

func (u *Uploader) forget(rel string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.verified, rel)
}

// ---- errors and their classes ----

var (
	errETagMismatch = errors.New("ETag mismatch")
	errChanged      = errors.New("the file changed while it was read")
	errStalled      = errors.New("no upload progress")
)

// localError is a problem with the local file: retrying will not help.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// tokenError is a problem with the token file. An unreadable file is
// transient (the kubelet may be swapping it); a malformed token is
// permanent, as the server would refuse it. It never holds the token.
type tokenError struct {
	err       error
	permanent bool
}

func (e *tokenError) Error() string { return "token: " + e.err.Error() }
func (e *tokenError) Unwrap() error { return e.err }

// classify reports whether err is worth another attempt, and a hint.
func classify(err error, stall time.Duration) (transient bool, hint string) {
	var le *localError
	var te *tokenError
	var er minio.ErrorResponse
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ce x509.CertificateInvalidError
	var tl TooLargeError
	switch {
	case errors.As(err, &tl):
		return false, tl.hint()
	case errors.As(err, &le):
		if errors.Is(err, fs.ErrPermission) {
			return false, "the sidecar cannot read it: make it readable by others (e.g. umask 022 in the trainer)"
		}
		return false, ""
	case errors.As(err, &te):
		if te.permanent {
			return false, "fix the token file; the sidecar re-reads it on every request"
		}
		return true, "the token file could not be read"
	case errors.As(err, &ue), errors.As(err, &he), errors.As(err, &ce):
		return false, "the server's certificate is not trusted by the CA file (TETHER_CA_FILE) or does not name the server; the CA file is re-read for every new connection"
	case errors.Is(err, errETagMismatch):
		return true, "the server stored other bytes than were sent (corrupted in transit)"
	case errors.Is(err, errChanged):
		return true, "the trainer is still writing it"
	case errors.Is(err, errStalled):
		return true, fmt.Sprintf("nothing was sent for %s", stall)
	case errors.As(err, &er) && er.StatusCode != 0:
		switch er.Code {
		case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed":
			return true, ""
		case "EntityTooLarge":
			return false, fmt.Sprintf("a single PUT is at most %s: exclude the file with the %s annotation", humanBytes(upload.MaxObjectSize), ExcludeAnnotation)
		case "BadDigest":
			return false, "the server received other bytes than were sent"
		}
		switch {
		case er.StatusCode >= 500, er.StatusCode == http.StatusRequestTimeout, er.StatusCode == http.StatusTooManyRequests:
			return true, ""
		case er.StatusCode == http.StatusUnauthorized:
			return false, "the binding server did not accept the token (X-Tether-Token): check the token file; the sidecar re-reads it on every request"
		case er.StatusCode == http.StatusForbidden:
			return false, "the binding server refused the key: it is outside this job's prefix, or the binding has finished"
		}
		return false, "the binding server refused the request"
	}
	// Network errors: connection refused or reset, timeouts, a truncated
	// answer, TLS handshake failures other than an untrusted certificate.
	return true, ""
}

func statusOf(err error) int {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.StatusCode
	}
	return 0
}

// ---- retry loop ----

// retry runs op until it succeeds, fails permanently, ctx ends or the
// attempts are exhausted. op gets the attempt number (1-based).
func (u *Uploader) retry(ctx context.Context, name string, op func(attempt int) error) (int, error) {
	var attempt int
	for attempt = 1; ; attempt++ {
		err := op(attempt)
		if err == nil {
			return attempt, nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return attempt, &FileError{Path: name, Attempts: attempt, Err: fmt.Errorf("%w (during: %v)", cerr, err),
				Hint: "the sync was stopped (deadline or shutdown) before the file was verified"}
		}
		transient, hint := classify(err, u.cfg.StallTimeout)
		if !transient {
			return attempt, &FileError{Path: name, Attempts: attempt, Permanent: true, Err: err, Hint: hint}
		}
		if attempt >= u.cfg.MaxAttempts {
			h := "the binding server did not accept it; check that it is reachable from the pod (TETHER_SERVER_URL) and its logs. The file is reported missing; the next sync round, if any, tries again"
			if hint != "" {
				h = hint + "; " + h
			}
			return attempt, &FileError{Path: name, Attempts: attempt, Err: err, Hint: h}
		}
		d := u.backoffAfter(attempt)
		u.log.Debug("upload attempt failed; retrying", "path", name, "attempt", attempt, "error", err, "retryIn", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return attempt, &FileError{Path: name, Attempts: attempt, Err: fmt.Errorf("%w (last error: %v)", ctx.Err(), err),
				Hint: "the sync was stopped (deadline or shutdown) before the file was verified"}
		case <-t.C:
		}
	}
}

// backoffAfter is the delay after the given failed attempt: full jitter over
// an exponentially growing cap.
func (u *Uploader) backoffAfter(attempt int) time.Duration { return u.backoff.After(attempt) }

// ---- files ----

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
	attempts, err := u.retry(ctx, rel, func(int) error {
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
	case len(key) > maxKeyLength:
		return fmt.Errorf("its object key is %d bytes long; the binding server takes at most %d", len(key), maxKeyLength)
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
			u.remember(rel, size, mtime, sum)
			u.verifiedBytes.Add(size)
			return Result{Path: rel, Size: size, MD5: sum, How: AlreadyPresent}, nil
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return Result{}, &localError{err}
		}
	case err == nil, statusOf(err) == http.StatusNotFound:
	default:
		return Result{}, fmt.Errorf("HEAD %s: %w", key, err)
	}

	sum, err := u.put(ctx, key, f, size)
	if err != nil {
		return Result{}, err
	}
	// The bytes sent were read from the file as it was at st; if it changed
	// meanwhile, what the server holds may be a mix: not verified.
	if err := unchanged(f, st); err != nil {
		return Result{}, err
	}
	u.remember(rel, size, mtime, sum)
	u.verifiedBytes.Add(size)
	return Result{Path: rel, Size: size, MD5: sum, How: Uploaded}, nil
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
	h := md5.New()
	pr := &progressReader{r: io.TeeReader(io.LimitReader(body, size), h)}
	pr.touch()

	// A stalled body (the server or the network stopped taking bytes) ends
	// the attempt; ResponseHeaderTimeout covers the wait for the answer.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go u.watchStall(pr, cancel, done)

	info, err := u.client.PutObject(actx, upload.Bucket, key, pr, size, minio.PutObjectOptions{
		DisableMultipart: true,
		ContentType:      "application/octet-stream",
	})
	if err != nil {
		if ctx.Err() == nil && errors.Is(context.Cause(actx), errStalled) {
			return "", fmt.Errorf("PUT %s: %w for %s", key, errStalled, u.cfg.StallTimeout)
		}
		return "", fmt.Errorf("PUT %s: %w", key, err)
	}
	if n := pr.n.Load(); n != size {
		return "", fmt.Errorf("PUT %s: %w (sent %d of %d bytes)", key, errChanged, n, size)
	}
	return checkETag(key, h, info.ETag)
}

func checkETag(key string, h hash.Hash, etag string) (string, error) {
	sum := hex.EncodeToString(h.Sum(nil))
	if got := trimETag(etag); !strings.EqualFold(got, sum) {
		return "", fmt.Errorf("PUT %s: %w: the server answered ETag %q, the MD5 of the bytes sent is %s", key, errETagMismatch, got, sum)
	}
	return sum, nil
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

// ---- the manifest ----

// PutManifest uploads m to <job-id>/manifest.json and verifies it like a
// file. It is the caller's job to upload it last.
func (u *Uploader) PutManifest(ctx context.Context, m upload.Manifest) (Result, error) {
	data, err := EncodeManifest(m)
	if err != nil {
		return Result{}, &FileError{Path: upload.ManifestName, Permanent: true, Err: err}
	}
	key := u.Key(upload.ManifestName)
	var sum string
	attempts, err := u.retry(ctx, upload.ManifestName, func(int) error {
		s, err := u.put(ctx, key, bytes.NewReader(data), int64(len(data)))
		sum = s
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Path: upload.ManifestName, Size: int64(len(data)), MD5: sum, How: Uploaded, Attempts: attempts}, nil
}

// ---- transport ----

// tokenTransport adds the token, read from its file for every request.
type tokenTransport struct {
	file string
	next http.RoundTripper
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := readToken(t.file)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set(upload.TokenHeader, string(token))
	if r.Method == http.MethodPut && r.ContentLength >= expectContinueMin {
		r.Header.Set("Expect", "100-continue")
	}
	return t.next.RoundTrip(r)
}

// readToken reads the token file for one request.
func readToken(file string) (binding.Token, error) {
	token, err := credentials.ReadToken(file)
	if err != nil {
		return "", &tokenError{err: err, permanent: errors.Is(err, credentials.ErrMalformedToken)}
	}
	return token, nil
}

// dialTLS dials with the CA file as it is now (re-read for every new
// connection, parsed again only when it changed).
func (u *Uploader) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	pool, err := u.caPool()
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		Config:    &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: host, NextProtos: []string{"http/1.1"}},
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return d.DialContext(ctx, network, addr)
}

func (u *Uploader) caPool() (*x509.CertPool, error) {
	pool, _, err := u.ca.Pool()
	if errors.Is(err, credentials.ErrNoCertificate) {
		return nil, &localError{err}
	}
	return pool, err
}

// TooLargeError is a file over MaxObjectSize: a single PUT cannot carry it.
type TooLargeError struct {
	Path string
	Size int64
}

func (e TooLargeError) Error() string {
	return fmt.Sprintf("its size %d bytes (%s) is over the %s limit of a single PUT (upload.MaxObjectSize)", e.Size, humanBytes(e.Size), humanBytes(upload.MaxObjectSize))
}

func (e TooLargeError) hint() string {
	return fmt.Sprintf("it is never uploaded and the job's artifacts are incomplete: split it, or exclude it with the %s annotation (e.g. %s: %q)",
		ExcludeAnnotation, ExcludeAnnotation, e.Path)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d B", n)
}
