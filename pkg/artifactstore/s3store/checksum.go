package s3store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// put is Put, with the body's CRC-64/NVME in an aws-chunked trailer if
// trailer is set (minio-go computes it as the body streams; the store
// checks it and keeps it, and answers with it).
func (b *S3Backend) put(ctx context.Context, key string, body io.Reader, size int64, trailer bool, cond ...map[string]string) (upload.ObjectInfo, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return upload.ObjectInfo{}, err
	}
	opts := minio.PutObjectOptions{
		DisableMultipart: true,
		// The body is verified by its MD5 against the ETag (or its
		// CRC-64/NVME); a SHA-256 of the payload for the signature would
		// cost a second pass.
		DisableContentSha256: true,
		ContentType:          "application/octet-stream",
	}
	if trailer && size > 0 {
		opts.Checksum = minio.ChecksumCRC64NVME
	}
	for _, c := range cond {
		setConditions(&opts, c)
	}
	var info minio.UploadInfo
	bodyErr, err := streamed(ctx, body, size, func(pctx context.Context, r io.Reader) error {
		var err error
		info, err = minio.Core{Client: b.Client}.PutObject(pctx, b.Bucket, b.name(key), r, size, "", "", opts)
		return err
	})
	if bodyErr != nil {
		return upload.ObjectInfo{}, fmt.Errorf("S3 PUT %s: %w", b.name(key), bodyErr)
	}
	if err != nil {
		return upload.ObjectInfo{}, fmt.Errorf("S3 PUT %s: %w", b.name(key), markPrecondition(markSlowDown(err)))
	}
	return upload.ObjectInfo{Size: info.Size, ETag: strings.ToLower(info.ETag), CRC64NVME: info.ChecksumCRC64NVME}, nil
}

// setConditions sets the write conditions in c (If-None-Match, If-Match)
// on opts.
func setConditions(opts *minio.PutObjectOptions, c map[string]string) {
	for k, v := range c {
		switch k {
		case "If-None-Match":
			opts.SetMatchETagExcept(strings.Trim(v, `"`))
		case "If-Match":
			opts.SetMatchETag(strings.Trim(v, `"`))
		}
	}
}

// streamed runs send with body as its request body: size bytes, an early
// end an error, and on a failure of body (bodyErr) or the end of ctx while
// the request is in flight, its connection reset, so the store keeps
// nothing of it (S3Backend.Put).
func streamed(ctx context.Context, body io.Reader, size int64, send func(ctx context.Context, r io.Reader) error) (bodyErr, err error) {
	pb := &putBody{r: body, size: size}
	// The request must not see ctx's cancellation: net/http would close the
	// connection cleanly. pb.abort resets it first, then cancels.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		pb.abort(context.Cause(ctx))
		cancel()
	})
	defer stop()
	pctx = httptrace.WithClientTrace(pctx, &httptrace.ClientTrace{GotConn: pb.gotConn})
	err = send(pctx, pb)
	return pb.abortErr(), err
}

// presignWith signs a PUT of key of exactly size bytes with client.
func (b *S3Backend) presignWith(ctx context.Context, c *minio.Client, key string, size int64, ttl time.Duration) (*url.URL, error) {
	signed := http.Header{}
	signed.Set("Content-Length", strconv.FormatInt(size, 10))
	return c.PresignHeader(ctx, http.MethodPut, b.Bucket, b.name(key), ttl, nil, signed)
}

// copyIf is a server-side copy of src over dst with conditions on dst
// (If-Match, If-None-Match), which stores that support them check, and on
// src (its ETag, srcETag[0]).
func (b *S3Backend) copyIf(ctx context.Context, src, dst string, cond map[string]string, srcETag ...string) error {
	if err := b.awaitProbed(ctx); err != nil {
		return err
	}
	so := minio.CopySrcOptions{Bucket: b.Bucket, Object: b.name(src)}
	if len(srcETag) > 0 {
		so.MatchETag = srcETag[0]
	}
	_, err := minio.Core{Client: b.Client}.CopyObject(ctx, b.Bucket, b.name(src), b.Bucket, b.name(dst), cond, so, minio.PutObjectOptions{})
	if err != nil {
		if notFound(err) {
			return fmt.Errorf("S3 copy %s: %w", b.name(src), upload.ErrNotFound)
		}
		return fmt.Errorf("S3 copy %s to %s: %w", b.name(src), b.name(dst), markPrecondition(markSlowDown(err)))
	}
	return nil
}

// ErrPrecondition is objects.ErrPrecondition.
var ErrPrecondition = objects.ErrPrecondition

func markPrecondition(err error) error {
	if minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: %w", ErrPrecondition, err)
	}
	return err
}

// Use makes the backend verify, write and promote as the start-up probe's
// choice allows (Capabilities.Choose). Without it the backend trusts the
// ETag as the MD5 (the zero Verification) and writes unconditionally.
func (b *S3Backend) Use(c Choice) {
	b.choice.Store(&c)
	b.probedOnce.Do(func() { close(b.probed) })
}

// Verification is what proves an object here (Verifier).
func (b *S3Backend) Verification() objects.Verification {
	if c := b.choice.Load(); c != nil {
		return c.Verification
	}
	return objects.Verification{}
}

// DirectUploads says whether presigned PUTs can be verified here: true
// until a probe said otherwise, unless the backend awaits its probe.
func (b *S3Backend) DirectUploads() bool {
	if c := b.choice.Load(); c != nil {
		return c.Direct
	}
	return !b.awaitProbe
}

// Transport is the HTTP transport the backend's client uses.
func (b *S3Backend) Transport() http.RoundTripper {
	if b.transport != nil {
		return b.transport
	}
	return http.DefaultTransport
}

var _ objects.ConditionalWriter = (*S3Backend)(nil)

// PutIfAbsent is Put with If-None-Match: * where the probe found the store
// honours it (everywhere else a plain Put).
func (b *S3Backend) PutIfAbsent(ctx context.Context, key string, body io.Reader, size int64) (upload.ObjectInfo, error) {
	c, err := b.chosen(ctx)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	if !c.ConditionalPut {
		return b.put(ctx, key, body, size, !c.NoTrailer)
	}
	return b.put(ctx, key, body, size, !c.NoTrailer, map[string]string{"If-None-Match": "*"})
}

// CopyIf is Copy under c: the source condition always (every S3 checks
// x-amz-copy-source-if-match), the destination's where the probe found
// the store honours it (versitygw v1.8.0 does not: its copies overwrite).
// An object over 5 GiB is copied in parts (copy_parts.go).
func (b *S3Backend) CopyIf(ctx context.Context, src, dst string, c objects.CopyCond) error {
	chosen, err := b.chosen(ctx)
	if err != nil {
		return err
	}
	if done, err := b.copyLarge(ctx, src, dst, c); done || err != nil {
		return err
	}
	cond := map[string]string{}
	if chosen.ConditionalCopy {
		switch {
		case c.DstAbsent:
			cond["If-None-Match"] = "*"
		case c.DstETag != "":
			cond["If-Match"] = `"` + c.DstETag + `"`
		}
	}
	if c.SrcETag == "" {
		return b.copyIf(ctx, src, dst, cond)
	}
	return b.copyIf(ctx, src, dst, cond, c.SrcETag)
}
