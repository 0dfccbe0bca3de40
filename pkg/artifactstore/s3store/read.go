package store

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/upload"
)

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

var (
	_ Opener    = FSBackend{}
	_ Opener    = (*S3Backend)(nil)
	_ Presigner = (*S3Backend)(nil)
)

// Open opens the object's data file. The size and ETag are the file's own
// (computed again if the metadata does not describe it), so a file changed
// on disk behind the store's back shows its real MD5.
func (b FSBackend) Open(_ context.Context, key string) (io.ReadCloser, upload.ObjectInfo, error) {
	p, err := fsPath(key)
	if err != nil {
		return nil, upload.ObjectInfo{}, err
	}
	root, err := b.open()
	if err != nil {
		return nil, upload.ObjectInfo{}, err
	}
	defer b.release(root)
	f, fi, err := openObject(root, p)
	if err != nil {
		return nil, upload.ObjectInfo{}, err
	}
	m, _, err := b.objectMeta(root, p, f, fi)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, upload.ObjectInfo{}, err
	}
	return f, upload.ObjectInfo{Size: fi.Size(), ETag: m.MD5}, nil
}

// Open streams the object from the bucket.
func (b *S3Backend) Open(ctx context.Context, key string) (io.ReadCloser, upload.ObjectInfo, error) {
	info, err := b.Head(ctx, key)
	if err != nil {
		return nil, upload.ObjectInfo{}, err
	}
	o, err := b.Client.GetObject(ctx, b.Bucket, b.name(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, upload.ObjectInfo{}, fmt.Errorf("S3 GET %s: %w", b.name(key), markSlowDown(err))
	}
	return o, info, nil
}

// MaxPresignTTL is the longest a presigned URL may live: S3's SigV4 limit
// is 7 days, and a read URL needs minutes.
const MaxPresignTTL = time.Hour

// PresignGet signs a GET of key for ttl (at most MaxPresignTTL). Signing is
// local: it does not contact the store.
func (b *S3Backend) PresignGet(ctx context.Context, key string, ttl time.Duration) (*url.URL, error) {
	if ttl <= 0 || ttl > MaxPresignTTL {
		return nil, fmt.Errorf("presigned URL lifetime %s: must be in (0, %s]", ttl, MaxPresignTTL)
	}
	u, err := b.Client.PresignedGetObject(ctx, b.Bucket, b.name(key), ttl, nil)
	if err != nil {
		return nil, fmt.Errorf("presigning GET %s: %w", b.name(key), err)
	}
	return u, nil
}

// CheckReadKey checks a key a reader asks for with the rules of a PUT's
// key (checkKey): a clean <job-id>/<path>, not under <job-id>/.tether/ but
// for the archived trainer logs (<job-id>/.tether/logs/, upload.LogsDir),
// which only the controller writes.
func CheckReadKey(key string) error {
	if job, rest, ok := strings.Cut(key, "/"); ok {
		if log, ok := strings.CutPrefix(rest, upload.LogsDir); ok && log != "" && !strings.Contains(log, "/") {
			key = job + "/" + log // the rest of the rules, on the log's name
		}
	}
	if _, _, e := checkKey(key); e != nil {
		return fmt.Errorf("%s", e.message)
	}
	return nil
}
