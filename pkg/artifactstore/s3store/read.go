package s3store

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

var (
	_ objects.Opener    = (*S3Backend)(nil)
	_ objects.Presigner = (*S3Backend)(nil)
)

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
