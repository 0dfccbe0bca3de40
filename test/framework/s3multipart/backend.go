package s3multipart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
)

// Backend is b with multipart uploads. Its methods shadow any the
// embedded backend gains.
type Backend struct {
	*s3store.S3Backend
}

var _ objects.Multiparter = (*Backend)(nil)

// ErrNoComplete is CompleteMultipart's answer: the tests that use Backend
// start, list and abort uploads, and a completion that claimed no checksum
// would not be the contract's.
var ErrNoComplete = errors.New("s3multipart: CompleteMultipart is not provided by the test backend; use the s3 backend's own once it has one")

func (b *Backend) core() minio.Core { return minio.Core{Client: b.Client} }

func (b *Backend) name(key string) string { return b.Prefix + key }

// MultipartCapable is true: the tests decide what the store can verify.
func (b *Backend) MultipartCapable() bool { return true }

// CreateMultipart starts an upload to key.
func (b *Backend) CreateMultipart(ctx context.Context, key string) (string, error) {
	id, err := b.core().NewMultipartUpload(ctx, b.Bucket, b.name(key), minio.PutObjectOptions{})
	if err != nil {
		return "", fmt.Errorf("S3 CreateMultipartUpload %s: %w", b.name(key), err)
	}
	return id, nil
}

// PutPart stores part n of upload id from size bytes of body.
func (b *Backend) PutPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (objects.Part, error) {
	p, err := b.core().PutObjectPart(ctx, b.Bucket, b.name(key), id, n, io.LimitReader(body, size), size, minio.PutObjectPartOptions{})
	if err != nil {
		return objects.Part{}, b.uploadErr("UploadPart", key, id, err)
	}
	return objects.Part{Number: n, Size: size, ETag: etag(p.ETag)}, nil
}

// ListParts returns the upload's stored parts in part order.
func (b *Backend) ListParts(ctx context.Context, key, id string) ([]objects.Part, error) {
	var parts []objects.Part
	for marker := 0; ; {
		res, err := b.core().ListObjectParts(ctx, b.Bucket, b.name(key), id, marker, 1000)
		if err != nil {
			return nil, b.uploadErr("ListParts", key, id, err)
		}
		for _, p := range res.ObjectParts {
			parts = append(parts, objects.Part{Number: p.PartNumber, Size: p.Size, ETag: etag(p.ETag)})
		}
		if !res.IsTruncated {
			return parts, nil
		}
		marker = res.NextPartNumberMarker
	}
}

// CompleteMultipart is not provided (ErrNoComplete).
func (b *Backend) CompleteMultipart(context.Context, string, string, []objects.Part, string) (upload.ObjectInfo, error) {
	return upload.ObjectInfo{}, ErrNoComplete
}

// AbortMultipart drops the upload and its parts; one already gone is not
// an error.
func (b *Backend) AbortMultipart(ctx context.Context, key, id string) error {
	err := b.core().AbortMultipartUpload(ctx, b.Bucket, b.name(key), id)
	if err = b.uploadErr("AbortMultipartUpload", key, id, err); errors.Is(err, objects.ErrNoSuchUpload) {
		return nil
	}
	return err
}

// ListMultipartUploads returns the open uploads of keys under prefix, page
// by page, their keys relative to the backend's Prefix.
func (b *Backend) ListMultipartUploads(ctx context.Context, prefix string) ([]objects.MultipartUpload, error) {
	var out []objects.MultipartUpload
	keyMarker, idMarker := "", ""
	for {
		res, err := b.core().ListMultipartUploads(ctx, b.Bucket, b.name(prefix), keyMarker, idMarker, "", 1000)
		if err != nil {
			return nil, fmt.Errorf("S3 ListMultipartUploads %s: %w", b.name(prefix), err)
		}
		for _, u := range res.Uploads {
			out = append(out, objects.MultipartUpload{Key: strings.TrimPrefix(u.Key, b.Prefix), ID: u.UploadID, Initiated: u.Initiated})
		}
		if !res.IsTruncated {
			return out, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}

// uploadErr wraps objects.ErrNoSuchUpload into the store's NoSuchUpload.
func (b *Backend) uploadErr(op, key, id string, err error) error {
	if err == nil {
		return nil
	}
	if minio.ToErrorResponse(err).Code == "NoSuchUpload" {
		return fmt.Errorf("S3 %s %s (upload %s): %w: %w", op, b.name(key), id, objects.ErrNoSuchUpload, err)
	}
	return fmt.Errorf("S3 %s %s (upload %s): %w", op, b.name(key), id, err)
}

// etag is an ETag as objects.Part holds it: lowercase hex without quotes.
func etag(s string) string { return strings.ToLower(strings.Trim(s, `"`)) }
