package s3store

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
)

var _ objects.PutPresigner = (*S3Backend)(nil)

// PresignPut signs a PUT of key whose Content-Length must be size: the
// store refuses a body of any other declared length (SignatureDoesNotMatch),
// so the object is at most what was authorized. Signing is local. With
// S3Options.PublicEndpoint the URL names that endpoint instead of the one
// the control plane uses.
func (b *S3Backend) PresignPut(ctx context.Context, key string, size int64, ttl time.Duration) (*url.URL, http.Header, error) {
	if ttl < time.Second || ttl > MaxPresignTTL {
		return nil, nil, fmt.Errorf("presigned URL lifetime %s: must be in [1s, %s]", ttl, MaxPresignTTL)
	}
	signed := http.Header{}
	signed.Set("Content-Length", strconv.FormatInt(size, 10))
	c := b.Client
	if b.Public != nil {
		c = b.Public
	}
	u, err := c.PresignHeader(ctx, http.MethodPut, b.Bucket, b.name(key), ttl, nil, signed)
	if err != nil {
		return nil, nil, fmt.Errorf("presigning PUT %s: %w", b.name(key), err)
	}
	// Content-Length is sent as the request's length; nothing else is signed.
	return u, http.Header{}, nil
}

// publicClient is a client for endpoint with o's credentials, used only to
// sign: its region is the backend's (a signing client must not ask an
// endpoint it may not reach for the bucket's location).
func publicClient(o S3Options, lookup minio.BucketLookupType) (*minio.Client, error) {
	if o.Region == "" {
		return nil, fmt.Errorf("S3 backend: a public endpoint needs the region set (presigned URLs are signed without asking the store)")
	}
	return minio.New(o.PublicEndpoint, &minio.Options{
		Creds:        credsOf(o),
		Secure:       !o.PublicInsecure,
		Region:       o.Region,
		BucketLookup: lookup,
		Transport:    o.Transport,
	})
}

var _ objects.PartPresigner = (*S3Backend)(nil)

// PresignPart signs a PUT of part n of upload id of key whose
// Content-Length must be size (the upload id and part number are in the
// signed query, so the URL writes nothing else).
func (b *S3Backend) PresignPart(ctx context.Context, key, id string, n int, size int64, ttl time.Duration) (*url.URL, http.Header, error) {
	if ttl < time.Second || ttl > MaxPresignTTL {
		return nil, nil, fmt.Errorf("presigned URL lifetime %s: must be in [1s, %s]", ttl, MaxPresignTTL)
	}
	signed := http.Header{}
	signed.Set("Content-Length", strconv.FormatInt(size, 10))
	c := b.Client
	if b.Public != nil {
		c = b.Public
	}
	q := url.Values{"partNumber": {strconv.Itoa(n)}, "uploadId": {id}}
	u, err := c.PresignHeader(ctx, http.MethodPut, b.Bucket, b.name(key), ttl, q, signed)
	if err != nil {
		return nil, nil, fmt.Errorf("presigning part %d of %s: %w", n, b.name(key), err)
	}
	return u, http.Header{}, nil
}
