package objects

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tether-dev/tether/pkg/upload"
)

// Part is one stored part of a multipart upload.
type Part struct {
	// Number is the part's number, 1 to upload.MaxParts.
	Number int
	Size   int64
	// ETag is the part's ETag as the store reports it, lowercase hex
	// without quotes: its MD5 on every store that stores parts as they
	// came (checked against the MD5 computed while streaming it).
	ETag string
}

// MultipartUpload is one open (neither completed nor aborted) multipart
// upload.
type MultipartUpload struct {
	Key, ID   string
	Initiated time.Time
}

// ErrNoSuchUpload is wrapped by a Multiparter's error for an upload id the
// store does not know (completed, aborted, or never created).
var ErrNoSuchUpload = errors.New("no such multipart upload")

// Multiparter is a backend that stores an object in parts (an S3
// multipart upload): the object appears at its key, whole, only when the
// upload is completed; until then its parts are kept (and billed) until
// it is aborted. The store keeps the object's full-object CRC-64/NVME
// when asked (Create's crc64 argument of Complete): Capable says whether
// the probe saw it do so.
type Multiparter interface {
	// MultipartCapable says whether objects stored in parts can be
	// verified on this store: it keeps and reports their full-object
	// CRC-64/NVME (the start-up probe saw it). Without it the endpoint
	// never stores in parts.
	MultipartCapable() bool
	// CreateMultipart starts an upload to key and returns its id. The
	// upload asks the store for a full-object CRC-64/NVME.
	CreateMultipart(ctx context.Context, key string) (string, error)
	// PutPart stores part n of upload id from size bytes of body and
	// returns it as stored. It does not read body beyond size bytes.
	PutPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (Part, error)
	// ListParts returns the upload's stored parts in part order.
	ListParts(ctx context.Context, key, id string) ([]Part, error)
	// CompleteMultipart makes key the concatenation of parts (in order),
	// claiming crc (S3's base64 CRC-64/NVME) as the whole object's
	// checksum (a store refuses a wrong one), and returns the object as
	// Head would.
	CompleteMultipart(ctx context.Context, key, id string, parts []Part, crc string) (upload.ObjectInfo, error)
	// AbortMultipart drops the upload and its parts; an upload already
	// gone is not an error.
	AbortMultipart(ctx context.Context, key, id string) error
	// ListMultipartUploads returns the open uploads of keys under prefix.
	ListMultipartUploads(ctx context.Context, prefix string) ([]MultipartUpload, error)
}

// MultipartOf is b as a Multiparter that can verify what it stores in
// parts, or nil.
func MultipartOf(b upload.Backend) Multiparter {
	// A store whose ETags are not MD5s (SSE-KMS, SSE-C) cannot have its
	// parts checked.
	if m, ok := b.(Multiparter); ok && m.MultipartCapable() && !VerificationOf(b).ByChecksum {
		return m
	}
	return nil
}

// PartPresigner is a backend that can sign a PUT of one part (exactly size
// bytes) of multipart upload id of key: the URL writes nothing but that
// part of that upload. The URL carries a signature: never log it.
type PartPresigner interface {
	PresignPart(ctx context.Context, key, id string, n int, size int64, ttl time.Duration) (*url.URL, http.Header, error)
}
