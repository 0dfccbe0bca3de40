package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

var _ objects.Multiparter = (*S3Backend)(nil)

// The headers that ask the store for a full-object CRC-64/NVME of a
// multipart upload (at its creation) and claim it (at its completion).
// minio-go passes x-amz-checksum-* metadata keys through as headers.
const (
	checksumAlgorithmHeader = "X-Amz-Checksum-Algorithm"
	checksumTypeHeader      = "X-Amz-Checksum-Type"
	fullObject              = "FULL_OBJECT"
)

// MultipartCapable says whether the start-up probe saw the store keep,
// check and report the full-object CRC-64/NVME of a multipart upload.
func (b *S3Backend) MultipartCapable() bool {
	c := b.choice.Load()
	return c != nil && c.Multipart
}

// CreateMultipart starts a multipart upload to key that asks for a
// full-object CRC-64/NVME.
func (b *S3Backend) CreateMultipart(ctx context.Context, key string) (string, error) {
	return b.createMultipart(ctx, key, true)
}

// createMultipart starts an upload; withChecksum asks for a full-object
// CRC-64/NVME (without it, the store keeps what it keeps by default).
func (b *S3Backend) createMultipart(ctx context.Context, key string, withChecksum bool) (string, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return "", err
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream"}
	if withChecksum {
		opts.UserMetadata = map[string]string{checksumAlgorithmHeader: "CRC64NVME", checksumTypeHeader: fullObject}
	}
	id, err := b.core().NewMultipartUpload(ctx, b.Bucket, b.name(key), opts)
	if err != nil {
		return "", fmt.Errorf("S3 create multipart upload %s: %w", b.name(key), markSlowDown(err))
	}
	return id, nil
}

// PutPart streams size bytes of body as part n, as Put streams an object:
// unsigned payload (no SHA-256 pass), never buffered (the body is not
// seekable, so minio-go sends it once, without retries), and a failing
// body resets the connection so the store keeps no partial part. The
// part carries no checksum of its own: the caller checks its MD5 against
// the ETag, and the store checks the whole object's CRC-64/NVME at
// completion (both servers tested take such parts into a FULL_OBJECT
// upload).
func (b *S3Backend) PutPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (objects.Part, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return objects.Part{}, err
	}
	if err := checkPart(n, size); err != nil {
		return objects.Part{}, err
	}
	var op minio.ObjectPart
	bodyErr, err := streamed(ctx, body, size, func(pctx context.Context, r io.Reader) error {
		var err error
		op, err = b.core().PutObjectPart(pctx, b.Bucket, b.name(key), id, n, r, size, minio.PutObjectPartOptions{DisableContentSha256: true})
		return err
	})
	if bodyErr != nil {
		return objects.Part{}, fmt.Errorf("S3 upload part %d of %s: %w", n, b.name(key), bodyErr)
	}
	if err != nil {
		return objects.Part{}, fmt.Errorf("S3 upload part %d of %s: %w", n, b.name(key), markMultipart(err))
	}
	return objects.Part{Number: n, Size: size, ETag: partETag(op.ETag)}, nil
}

// checkPart refuses a part number or size S3 refuses.
func checkPart(n int, size int64) error {
	if n < 1 || n > upload.MaxParts {
		return fmt.Errorf("part number %d: S3 numbers parts 1 to %d", n, upload.MaxParts)
	}
	if size < 0 || size > upload.MaxPartSize {
		return fmt.Errorf("a part of %d bytes: S3 parts hold 0 to %d bytes (5 GiB)", size, upload.MaxPartSize)
	}
	return nil
}

func partETag(e string) string { return strings.ToLower(strings.Trim(e, `"`)) }

// ListParts returns the upload's parts, every page of them, as the store
// lists them: SeaweedFS 4.53 lists every upload of a part number until the
// upload is completed (the completion takes the one whose ETag it names),
// where AWS and versitygw list the last one only.
func (b *S3Backend) ListParts(ctx context.Context, key, id string) ([]objects.Part, error) {
	listed, err := b.listParts(ctx, key, id)
	if err != nil {
		return nil, err
	}
	parts := make([]objects.Part, len(listed))
	for i, p := range listed {
		parts[i] = objects.Part{Number: p.PartNumber, Size: p.Size, ETag: partETag(p.ETag)}
	}
	return parts, nil
}

// listParts is the store's listing of the upload's parts, with the
// checksums it reports for them.
func (b *S3Backend) listParts(ctx context.Context, key, id string) ([]minio.ObjectPart, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return nil, err
	}
	var parts []minio.ObjectPart
	for marker := 0; ; {
		r, err := b.core().ListObjectParts(ctx, b.Bucket, b.name(key), id, marker, 0)
		if err != nil {
			return nil, fmt.Errorf("S3 list parts of %s: %w", b.name(key), markMultipart(err))
		}
		parts = append(parts, r.ObjectParts...)
		if !r.IsTruncated || r.NextPartNumberMarker <= marker {
			return parts, nil
		}
		marker = r.NextPartNumberMarker
	}
}

// CompleteMultipart makes key the concatenation of parts, claiming crc as
// the whole object's CRC-64/NVME (FULL_OBJECT): a store that keeps
// checksums refuses a wrong one and keeps nothing at key.
func (b *S3Backend) CompleteMultipart(ctx context.Context, key, id string, parts []objects.Part, crc string) (upload.ObjectInfo, error) {
	if crc == "" {
		return upload.ObjectInfo{}, fmt.Errorf("completing the multipart upload of %s: no CRC-64/NVME of the whole object given; the store checks it and keeps it", b.name(key))
	}
	return b.complete(ctx, key, id, parts, crc, nil)
}

// complete completes the upload under conditions cond (If-Match,
// If-None-Match), claiming crc as the whole object's CRC-64/NVME unless it
// is empty. Each part is completed with the checksum the store reports
// for it, if any: versitygw refuses a completion of an upload created
// with a checksum algorithm that lacks the parts' checksums, even a
// FULL_OBJECT one, and the parts were sent without one.
func (b *S3Backend) complete(ctx context.Context, key, id string, parts []objects.Part, crc string, cond map[string]string) (upload.ObjectInfo, error) {
	listed, err := b.listParts(ctx, key, id)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	// By number and ETag: SeaweedFS lists every upload of a part number.
	type version struct {
		n    int
		etag string
	}
	stored := make(map[version]minio.ObjectPart, len(listed))
	for _, p := range listed {
		stored[version{p.PartNumber, partETag(p.ETag)}] = p
	}
	cps := make([]minio.CompletePart, len(parts))
	var size int64
	for i, p := range parts {
		cps[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
		s, ok := stored[version{p.Number, p.ETag}]
		if !ok {
			// Not stored as named: the store refuses the completion.
			size += p.Size
			continue
		}
		cps[i].ChecksumCRC64NVME = s.ChecksumCRC64NVME
		size += s.Size
	}
	opts := minio.PutObjectOptions{}
	if crc != "" {
		opts.UserMetadata = map[string]string{upload.ChecksumHeader: crc, checksumTypeHeader: fullObject}
	}
	setConditions(&opts, cond)
	ui, err := b.core().CompleteMultipartUpload(ctx, b.Bucket, b.name(key), id, cps, opts)
	if err != nil {
		return upload.ObjectInfo{}, fmt.Errorf("S3 complete multipart upload of %s (%d parts, CRC-64/NVME %q): %w", b.name(key), len(parts), crc, markPrecondition(markMultipart(err)))
	}
	info := upload.ObjectInfo{Size: size, ETag: partETag(ui.ETag), CRC64NVME: ui.ChecksumCRC64NVME}
	if info.CRC64NVME != "" {
		return info, nil
	}
	// The answer lacks the checksum: the store's HEAD has it, if it kept one.
	h, err := b.Head(ctx, key)
	if err != nil {
		return upload.ObjectInfo{}, fmt.Errorf("S3 HEAD %s after completing its multipart upload: %w", b.name(key), err)
	}
	if info.ETag == "" || h.ETag == info.ETag {
		return h, nil
	}
	return info, nil
}

// AbortMultipart drops the upload and its parts; an upload already gone
// (completed, aborted, expired) is not an error.
func (b *S3Backend) AbortMultipart(ctx context.Context, key, id string) error {
	if err := b.awaitProbed(ctx); err != nil {
		return err
	}
	err := b.core().AbortMultipartUpload(ctx, b.Bucket, b.name(key), id)
	if err == nil || errors.Is(markMultipart(err), objects.ErrNoSuchUpload) {
		return nil
	}
	return fmt.Errorf("S3 abort multipart upload of %s: %w", b.name(key), markSlowDown(err))
}

// ListMultipartUploads returns the open uploads of keys under prefix,
// every page of them, with keys relative to the backend's Prefix.
func (b *S3Backend) ListMultipartUploads(ctx context.Context, prefix string) ([]objects.MultipartUpload, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return nil, err
	}
	var ups []objects.MultipartUpload
	var keyMarker, idMarker string
	for {
		r, err := b.core().ListMultipartUploads(ctx, b.Bucket, b.name(prefix), keyMarker, idMarker, "", 0)
		if err != nil {
			return nil, fmt.Errorf("S3 list multipart uploads under %s: %w", b.name(prefix), markSlowDown(err))
		}
		for _, u := range r.Uploads {
			if k, ok := strings.CutPrefix(u.Key, b.Prefix); ok {
				ups = append(ups, objects.MultipartUpload{Key: k, ID: u.UploadID, Initiated: u.Initiated})
			}
		}
		if !r.IsTruncated || r.NextKeyMarker == keyMarker && r.NextUploadIDMarker == idMarker {
			return ups, nil
		}
		keyMarker, idMarker = r.NextKeyMarker, r.NextUploadIDMarker
	}
}

func (b *S3Backend) core() minio.Core { return minio.Core{Client: b.Client} }

// markMultipart marks S3's "no such upload" with objects.ErrNoSuchUpload,
// and "slow down" as markSlowDown does.
func markMultipart(err error) error {
	if minio.ToErrorResponse(err).Code == "NoSuchUpload" {
		return fmt.Errorf("%w: %w", objects.ErrNoSuchUpload, err)
	}
	return markSlowDown(err)
}
