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

// What a backend may do beyond upload.Backend. Each part of the store asks
// for the capability it uses and does without it where it can.

// Stater is implemented by backends that know when an object was stored.
// HEAD responses carry its Last-Modified; without a Stater they carry the
// Unix epoch (minio-go's StatObject refuses a response without one).
type Stater interface {
	Stat(ctx context.Context, key string) (upload.ObjectInfo, time.Time, error)
}

// Opener is a backend that streams a stored object to a reader that holds
// none of the store's credentials (the orchestrator read endpoint).
type Opener interface {
	// Open returns the object's content and its size and ETag.
	Open(ctx context.Context, key string) (io.ReadCloser, upload.ObjectInfo, error)
}

// Presigner is a backend that can hand a reader a short-lived URL instead of
// streaming the object through the control plane.
type Presigner interface {
	// PresignGet returns a GET URL for key valid for ttl.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (*url.URL, error)
}

// PutPresigner is a backend that can sign a single PUT of exactly size bytes
// to key (direct uploads). The URL and headers are the request to send; the
// URL carries a signature, so it is never logged.
type PutPresigner interface {
	PresignPut(ctx context.Context, key string, size int64, ttl time.Duration) (*url.URL, http.Header, error)
}

// PageLister is a backend that lists at most n keys under prefix, in key
// order, and says whether more follow (the S3 backend: one LIST page).
// Without it a sweep lists everything and deletes the first n.
type PageLister interface {
	ListPage(ctx context.Context, prefix string, n int) (keys []string, more bool, err error)
}

// DirLister is a backend that lists the names one level under prefix
// (S3's delimiter listing), calling fn with each; fn's error stops it.
// Without it, the job ids under upload.UploadsPrefix come from a full list.
type DirLister interface {
	ListDirs(ctx context.Context, prefix string, fn func(name string) error) error
}

// BodyHasher is a backend whose Put computes the MD5 of exactly the bytes
// it reads from the body, in this process, and returns it as the ETag
// (fsstore.FSBackend): the endpoint takes that as the body's MD5 instead of
// hashing the body a second time.
type BodyHasher interface{ HashesBody() }

// HeadOpt is Backend.Head with "not found" as nil.
func HeadOpt(ctx context.Context, b upload.Backend, key string) (*upload.ObjectInfo, error) {
	info, err := b.Head(ctx, key)
	switch {
	case errors.Is(err, upload.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &info, nil
}

// CopyCond are the conditions of a compare-and-set copy: the source must
// still be the version SrcETag names (x-amz-copy-source-if-match), and the
// destination the version DstETag names (If-Match) or, DstAbsent, hold
// nothing (If-None-Match: *).
type CopyCond struct {
	SrcETag, DstETag string
	DstAbsent        bool
}

// ConditionalWriter is a backend whose store checks write conditions, so
// two control-plane replicas never overwrite each other's decision: a
// write whose condition no longer holds fails with ErrPrecondition. Each
// condition the store does not honour (its start-up probe said so) is not
// sent, and the per-key lock of one replica is then all that orders writes
// of one key (docs/artifacts.md, "Two replicas, one key").
type ConditionalWriter interface {
	// PutIfAbsent is Put that stores nothing if key holds an object.
	PutIfAbsent(ctx context.Context, key string, body io.Reader, size int64) (upload.ObjectInfo, error)
	// CopyIf is Copy under c.
	CopyIf(ctx context.Context, src, dst string, c CopyCond) error
}
