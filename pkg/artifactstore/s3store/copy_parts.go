package s3store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// maxCopySize is the largest object one CopyObject copies (S3's 5 GiB);
// a larger one is copied in parts. Tests lower it.
var maxCopySize = upload.MaxSinglePutSize

// copyLarge copies src over dst in parts (UploadPartCopy of ranges of at
// most maxCopySize) if src is larger than one copy takes; done says it
// did, or failed trying. The copy keeps the source's full-object
// CRC-64/NVME, which is checked after the copy: a source without one is
// not copied.
//
// Every part is copied only from the version of src its HEAD saw
// (x-amz-copy-source-if-match), so a source replaced meanwhile fails the
// copy instead of mixing versions; c.SrcETag, if set, must be that
// version. c's destination conditions go with the completion where the
// probe found the store honours them there (Choice.ConditionalComplete).
func (b *S3Backend) copyLarge(ctx context.Context, src, dst string, c objects.CopyCond) (done bool, err error) {
	from, err := b.Head(ctx, src)
	switch {
	case errors.Is(err, upload.ErrNotFound):
		return true, fmt.Errorf("S3 copy %s: %w", b.name(src), upload.ErrNotFound)
	case err != nil:
		return true, fmt.Errorf("S3 copy %s to %s: %w", b.name(src), b.name(dst), err)
	case from.Size <= maxCopySize:
		return false, nil
	case c.SrcETag != "" && c.SrcETag != from.ETag:
		return true, fmt.Errorf("S3 copy %s to %s: the source's ETag is %s, not %s: %w", b.name(src), b.name(dst), from.ETag, c.SrcETag, ErrPrecondition)
	case from.CRC64NVME == "":
		return true, fmt.Errorf("S3 copy %s to %s: the source is %d bytes, more than one copy request takes (%d), and the store reports no CRC-64/NVME of it, which a copy in parts must keep to be verified: "+
			"store objects over 5 GiB through Tether (which stores them with one) on a store whose probe found multipart_checksum", b.name(src), b.name(dst), from.Size, maxCopySize)
	}
	ch, err := b.chosen(ctx)
	if err != nil {
		return true, err
	}
	return true, b.copyParts(ctx, src, dst, from, c, ch)
}

// copyParts copies src (as from describes it) over dst in parts and checks
// the copy's size and CRC-64/NVME against from's.
func (b *S3Backend) copyParts(ctx context.Context, src, dst string, from upload.ObjectInfo, c objects.CopyCond, ch Choice) error {
	id, err := b.createMultipart(ctx, dst, !ch.CopyPartsUnasked)
	if err != nil {
		return err
	}
	completed := false
	defer func() {
		if !completed {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = b.AbortMultipart(actx, dst, id)
		}
	}()
	partSize := upload.PartSize(from.Size, maxCopySize)
	sourceIs := map[string]string{"x-amz-copy-source-if-match": `"` + from.ETag + `"`}
	var parts []objects.Part
	for n, off := 1, int64(0); off < from.Size; n, off = n+1, off+partSize {
		size := min(partSize, from.Size-off)
		cp, err := b.core().CopyObjectPart(ctx, b.Bucket, b.name(src), b.Bucket, b.name(dst), id, n, off, size, sourceIs)
		if err != nil {
			if notFound(err) {
				return fmt.Errorf("S3 copy %s: %w", b.name(src), upload.ErrNotFound)
			}
			return fmt.Errorf("S3 copy of bytes %d to %d of %s to part %d of %s: %w", off, off+size-1, b.name(src), n, b.name(dst), markPrecondition(markMultipart(err)))
		}
		parts = append(parts, objects.Part{Number: n, Size: size, ETag: partETag(cp.ETag)})
	}
	crc := from.CRC64NVME
	if ch.CopyPartsUnasked {
		crc = ""
	}
	cond := map[string]string{}
	if ch.ConditionalComplete {
		switch {
		case c.DstAbsent:
			cond["If-None-Match"] = "*"
		case c.DstETag != "":
			cond["If-Match"] = `"` + c.DstETag + `"`
		}
	}
	info, err := b.complete(ctx, dst, id, parts, crc, cond)
	if err != nil {
		return fmt.Errorf("S3 copy %s to %s in %d parts: %w", b.name(src), b.name(dst), len(parts), err)
	}
	completed = true
	if info.Size != from.Size || info.CRC64NVME != from.CRC64NVME {
		return fmt.Errorf("S3 copy %s to %s in %d parts: the copy is %d bytes with CRC-64/NVME %q, the source %d bytes with %q: the store did not copy it faithfully", b.name(src), b.name(dst), len(parts), info.Size, info.CRC64NVME, from.Size, from.CRC64NVME)
	}
	return nil
}
