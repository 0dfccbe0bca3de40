package artifacts

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
	"github.com/tether-dev/tether/pkg/sidecar/retry"
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
	// NodeRank is the pod's node rank: rank r > 0 keeps its keys, manifest
	// included, under <job-id>/nodes/<r>/ (upload.NodePrefix).
	NodeRank int
	// PodUID is the sidecar's pod (TETHER_POD_UID), sent with every request:
	// the server lets a node write only its own rank's keys. A Syncer sets
	// it from its own PodUID when empty.
	PodUID string
	// TokenFile holds the job's token. It is read again for every request,
	// so a rotated token is picked up; the token is only ever put in the
	// TokenHeader header and never logged or put in an error.
	TokenFile string
	// PodTokenFile holds the pod's projected ServiceAccount token, sent in
	// names.HeaderPodToken with every request (it proves PodUID); read
	// again for every request, never logged. Empty sends none (the server
	// refuses the request).
	PodTokenFile string
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
	// MaxConns is how many keep-alive connections to the server are kept
	// for reuse: the Syncer's Workers, so that each upload running reuses
	// one; 0 means DefaultWorkers.
	MaxConns int

	// NoTrailer sends streamed bodies without their CRC-64/NVME trailer
	// (the server still checks the store's checksum against its own): what
	// the benchmarks compare the trailer's cost with.
	NoTrailer bool
	// DirectMinSize: files of at least this many bytes go straight to the
	// artifact store when the binding server offers it (direct mode); 0
	// means DefaultDirectMinSize, negative always sends through the server.
	DirectMinSize int64
	// ResumeMinSize: before a file of at least this many bytes is sent
	// through the binding server, the Uploader asks where its upload may
	// resume (resume.go); 0 means DefaultResumeMinSize, negative never.
	ResumeMinSize int64

	// Logger receives debug logs of retries; nil discards them.
	Logger *slog.Logger
	// WrapTransport, if set, wraps the HTTP transport below the layer that
	// adds the token (tests count, inspect or break requests with it).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// WrapStoreTransport, if set, wraps the transport of direct uploads'
	// PUTs to the artifact store (which never carry the token).
	WrapStoreTransport func(http.RoundTripper) http.RoundTripper
}

// Uploader puts one file as one verified PUT. It is safe for concurrent use.
//
// A file is verified only when the server's ETag equals the MD5 the
// Uploader computed over the very bytes it sent, while sending them; nothing
// else ever counts as verified.
type Uploader struct {
	cfg UploaderConfig
	// podUID is sent with every request (names.HeaderArtifactPodUID).
	podUID atomic.Pointer[string]
	log    *slog.Logger
	client *minio.Client

	mu       sync.Mutex
	verified map[string]verifiedFile // by relative path

	verifiedBytes atomic.Int64

	ca      *credentials.CA
	backoff *retry.Backoff
	direct  direct
	// noTrailer: the server refused an aws-chunked trailer (put).
	noTrailer atomic.Bool
	// noResume: the server has no resume exchange (an older server).
	noResume atomic.Bool
	// restartParts: keys whose stored parts were found to be other bytes
	// than the file's; their next authorize asks for a new upload.
	restartParts sync.Map
}

// verifiedFile is what the Uploader knows of a file it verified: while its
// size and mtime are unchanged it is neither read nor sent again.
type verifiedFile struct {
	size  int64
	mtime time.Time
	md5   string
	crc   string
	at    time.Time // when it was verified (checkpoint.go)
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
	// MD5 is the lowercase hex MD5 of the content, equal to the stored ETag
	// where the store's ETags are MD5s.
	MD5 string
	// CRC64NVME is the content's CRC-64/NVME (S3's base64 form), which the
	// server and the store checked where they report one.
	CRC64NVME string
	How       How
	Attempts  int
	// Resumed is how many of the file's first bytes were not sent again:
	// the stored parts of an upload cut short held them.
	Resumed int64
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
	u, err := binding.ParseServerURL(cfg.ServerURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("uploader: %w", err)
	case u.Path != "" && u.Path != "/":
		// minio-go endpoints are host:port; the contract puts the bucket at
		// the listener's root.
		return nil, fmt.Errorf("uploader: ServerURL %q: the artifact endpoint is path-style at the server's root; a path prefix is not supported", cfg.ServerURL)
	case cfg.TokenFile == "":
		return nil, errors.New("uploader: TokenFile is required")
	case !binding.ValidID(cfg.JobID):
		return nil, fmt.Errorf("uploader: JobID %q is not a job id (%s)", cfg.JobID, binding.IDRule)
	case cfg.MaxAttempts < 0 || cfg.BackoffInitial < 0 || cfg.BackoffMax < 0 || cfg.StallTimeout < 0 || cfg.MaxConns < 0:
		return nil, errors.New("uploader: negative MaxAttempts, backoff, StallTimeout or MaxConns")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultWorkers
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
		ca: credentials.NewCA(cfg.CAFile), backoff: retry.NewBackoff(cfg.BackoffInitial, cfg.BackoffMax)}
	if up.log == nil {
		up.log = slog.New(slog.DiscardHandler)
	}

	tr := &http.Transport{
		Proxy:                 nil, // the binding server is in the cluster
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		DialTLSContext:        up.dialTLS,
		ResponseHeaderTimeout: responseHeaderTimeout,
		ExpectContinueTimeout: 2 * time.Second,
		MaxIdleConnsPerHost:   cfg.MaxConns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
	}
	var rt http.RoundTripper = tr
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(rt)
	}
	up.podUID.Store(&cfg.PodUID)
	up.noTrailer.Store(cfg.NoTrailer)
	rt = &tokenTransport{file: cfg.TokenFile, podTokenFile: cfg.PodTokenFile, pod: &up.podUID, next: rt}
	up.initDirect(u.Host, rt)

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

// Key is the object key of a path relative to the artifact directory.
func (u *Uploader) Key(rel string) string {
	return u.cfg.JobID + "/" + upload.NodePrefix(u.cfg.NodeRank) + rel
}

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

// VerifiedFile is Verified as a manifest entry (both digests).
func (u *Uploader) VerifiedFile(rel string, size int64, mtime time.Time) (upload.ManifestFile, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.verified[rel]
	if !ok || v.size != size || !v.mtime.Equal(mtime) {
		return upload.ManifestFile{}, false
	}
	return upload.ManifestFile{Path: rel, Size: size, MD5: v.md5, CRC64NVME: v.crc}, true
}

func (u *Uploader) remember(rel string, size int64, mtime time.Time, sum, crc string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.verified[rel] = verifiedFile{size: size, mtime: mtime, md5: sum, crc: crc, at: time.Now()}
}

// VerifiedAt returns when rel was verified, if its size and mtime are still
// size and mtime: a file changed since it was verified is not.
func (u *Uploader) VerifiedAt(rel string, size int64, mtime time.Time) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v, ok := u.verified[rel]
	if !ok || v.size != size || !v.mtime.Equal(mtime) {
		return time.Time{}, false
	}
	return v.at, true
}

func (u *Uploader) forget(rel string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.verified, rel)
}
