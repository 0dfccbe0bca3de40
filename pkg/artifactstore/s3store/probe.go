package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// ProbePrefix holds the start-up probe's objects (one top-level prefix
// outside every job's, like upload.UploadsPrefix); each is deleted once
// looked at.
const ProbePrefix = upload.ReservedDir + "-probe/"

// Capabilities is what the start-up probe saw the store do, each with one
// small object under ProbePrefix.
type Capabilities struct {
	// ETagMD5: a single PUT's ETag, as PUT and HEAD answer it, is the MD5
	// (false under SSE-KMS or SSE-C).
	ETagMD5 bool
	// Checksums: the CRC-64/NVME sent with a PUT is checked (a wrong one
	// is refused) and returned by HEAD with x-amz-checksum-mode: ENABLED.
	Checksums bool
	// TrailerAccepted: a PUT with its checksum in an aws-chunked trailer
	// (how the backend sends it: a streamed body's is known at its end)
	// succeeds; TrailingChecksum: and that checksum is checked and kept.
	TrailerAccepted, TrailingChecksum bool
	// DefaultChecksum: a PUT without a checksum gets a CRC-64/NVME the
	// store computed (AWS since 2025): what verifies a direct upload where
	// the ETag is not the MD5.
	DefaultChecksum bool
	// PresignedPut: a presigned single PUT is honoured.
	PresignedPut bool
	// Copy: a server-side copy has the source's size, and its MD5 as ETag
	// where ETagMD5; CopyKeepsChecksum: and its CRC-64/NVME.
	Copy, CopyKeepsChecksum bool
	// IfNoneMatch, IfMatch: a PUT with If-None-Match: * over an object, or
	// If-Match another ETag, is refused (412). CopyIfNoneMatch,
	// CopyIfMatch: the same conditions on a copy's destination.
	IfNoneMatch, IfMatch, CopyIfNoneMatch, CopyIfMatch bool
	// MultipartChecksum: a multipart upload (a 5 MiB part and a small one)
	// that asked for a full-object CRC-64/NVME is refused at completion
	// with a wrong one, leaving nothing at its key, and completed with the
	// right one keeps it and returns it with HEAD (probe_multipart.go).
	MultipartChecksum bool
	// MultipartDefaultChecksum: a multipart upload that asked for no
	// checksum gets the full-object CRC-64/NVME the store computed.
	MultipartDefaultChecksum bool
	// MultipartIfNoneMatch, MultipartIfMatch: a completion with
	// If-None-Match: * over an object, or If-Match another ETag, is
	// refused (412), the object left as it was.
	MultipartIfNoneMatch, MultipartIfMatch bool
}

// Each is every capability by its metric name, in a fixed order.
func (c Capabilities) Each() []struct {
	Name string
	On   bool
} {
	return []struct {
		Name string
		On   bool
	}{
		{"etag_md5", c.ETagMD5}, {"checksum_crc64nvme", c.Checksums}, {"trailer_accepted", c.TrailerAccepted}, {"trailing_checksum", c.TrailingChecksum},
		{"default_checksum", c.DefaultChecksum}, {"presigned_put", c.PresignedPut}, {"copy", c.Copy},
		{"copy_keeps_checksum", c.CopyKeepsChecksum}, {"put_if_none_match", c.IfNoneMatch}, {"put_if_match", c.IfMatch},
		{"copy_if_none_match", c.CopyIfNoneMatch}, {"copy_if_match", c.CopyIfMatch},
		{"multipart_checksum", c.MultipartChecksum}, {"multipart_default_checksum", c.MultipartDefaultChecksum},
		{"multipart_if_none_match", c.MultipartIfNoneMatch}, {"multipart_if_match", c.MultipartIfMatch},
	}
}

// KeyValues are the capabilities for a structured log line.
func (c Capabilities) KeyValues() []any {
	var kv []any
	for _, e := range c.Each() {
		kv = append(kv, e.Name, e.On)
	}
	return kv
}

// Choice is what the control plane does with a store's capabilities.
type Choice struct {
	Verification objects.Verification
	// Direct: direct uploads can be verified (presigned PUTs honoured, and
	// the store's ETag or its own checksum of a PUT made without one).
	Direct bool
	// Conditional: final keys are written (If-None-Match: *) and promoted
	// (copy If-Match) conditionally.
	ConditionalPut, ConditionalCopy bool
	// NoTrailer: the store refuses a checksum in an aws-chunked trailer;
	// PUTs go without one (verified by the ETag alone).
	NoTrailer bool
	// Multipart: objects may be stored in parts (objects.Multiparter),
	// each verified by the full-object CRC-64/NVME the store checked and
	// keeps (Capabilities.MultipartChecksum); without it every object is
	// a single PUT, at most 5 GiB.
	Multipart bool
	// CopyPartsUnasked: a copy in parts (of an object over 5 GiB) asks
	// for no checksum and takes the full-object CRC-64/NVME the store
	// computes (Capabilities.MultipartDefaultChecksum): versitygw v1.8.0
	// records a copied part's checksum as the whole source's when one is
	// asked, and then refuses the right one at completion.
	CopyPartsUnasked bool
	// ConditionalComplete: a copy in parts is completed under the
	// destination's conditions (If-Match, If-None-Match: *).
	ConditionalComplete bool
	// Why says, for the log, what the choice rests on.
	Why string
}

// ErrNoVerification is a store on which no upload can be verified.
var ErrNoVerification = errors.New("no trustworthy verification")

// Choose picks the verification the capabilities allow, or says why none
// is left and how to fix it.
func (c Capabilities) Choose() (Choice, error) {
	var ch Choice
	switch {
	case c.ETagMD5 && c.Copy:
		ch.Why = "the store's ETag of a single PUT and of a copy is the MD5"
		if c.Checksums {
			ch.Why += "; the CRC-64/NVME it returns is checked too"
		}
		ch.Direct = c.PresignedPut
	case c.Checksums && c.TrailingChecksum && c.Copy && c.CopyKeepsChecksum:
		ch.Verification.ByChecksum = true
		ch.Why = "the store's ETags are not MD5s (SSE-KMS or SSE-C?): uploads are verified by the CRC-64/NVME the store checks and returns"
		ch.Direct = c.PresignedPut && c.DefaultChecksum
	case !c.Copy:
		return ch, fmt.Errorf("%w: the store's server-side copy (CopyObject) failed or changed the object, and promoting pending artifacts needs it: use a store that supports CopyObject", ErrNoVerification)
	default:
		return ch, fmt.Errorf("%w: the store's ETag of a single PUT is not the body's MD5 (a bucket with SSE-KMS or SSE-C does that) and it does not check and return the CRC-64/NVME sent with a PUT (x-amz-checksum-crc64nvme in an aws-chunked trailer, read back with x-amz-checksum-mode: ENABLED)%s: "+
			"use a bucket without SSE-KMS/SSE-C (SSE-S3 keeps ETag = MD5), or a store with flexible checksums (AWS S3 has them)", ErrNoVerification, c.missingChecksum())
	}
	ch.NoTrailer = !c.TrailerAccepted
	ch.ConditionalPut = c.IfNoneMatch
	ch.ConditionalCopy = c.CopyIfMatch && c.CopyIfNoneMatch
	ch.chooseMultipart(c)
	return ch, nil
}

// chooseMultipart sets what the choice does with multipart uploads.
func (ch *Choice) chooseMultipart(c Capabilities) {
	ch.Multipart = c.MultipartChecksum
	ch.CopyPartsUnasked = c.MultipartDefaultChecksum
	ch.ConditionalComplete = c.MultipartIfNoneMatch && c.MultipartIfMatch
	if ch.Multipart {
		ch.Why += "; large objects are stored in parts, verified by the full-object CRC-64/NVME the store checks and keeps"
	} else {
		ch.Why += "; every object is one PUT of at most 5 GiB: the store did not check and keep the full-object CRC-64/NVME of a multipart upload"
	}
}

func (c Capabilities) missingChecksum() string {
	switch {
	case !c.Checksums:
		return ""
	case !c.TrailingChecksum:
		return " (it checks a checksum sent as a header, but not one in an aws-chunked trailer)"
	case !c.CopyKeepsChecksum:
		return " (a copy loses the checksum)"
	}
	return ""
}

// Probe finds out what the store does (Capabilities) with a few objects
// under ProbePrefix, deleted before it returns. client makes the presigned
// PUT (nil: http.DefaultClient). An error means the store cannot be used at
// all (no PUT, no HEAD): it names the request that failed.
func (b *S3Backend) Probe(ctx context.Context, client *http.Client) (Capabilities, error) {
	if client == nil {
		client = http.DefaultClient
	}
	// The probe's requests go through a backend that awaits it.
	ctx = probing(ctx)
	var c Capabilities
	base := b.probeBase(ctx)
	var keys []string
	key := func(name string) string { k := base + name; keys = append(keys, k); return k }
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, k := range keys {
			_ = b.Delete(dctx, k)
		}
	}()
	body := []byte("tether start-up probe: what does this store do with a single PUT?\n")
	sum := md5.Sum(body)
	md5hex := hex.EncodeToString(sum[:])
	crc := upload.CRC64NVMEOf(body)

	// 1. A PUT as the backend makes them (checksum in a trailer).
	obj := key("object")
	put, err := b.put(ctx, obj, bytes.NewReader(body), int64(len(body)), true)
	if err != nil {
		// Maybe only the trailer is refused: try the plain body.
		var perr error
		if put, perr = b.put(ctx, obj, bytes.NewReader(body), int64(len(body)), false); perr != nil {
			return c, fmt.Errorf("probing the store: a PUT of %s failed: %w", b.name(obj), perr)
		}
	} else {
		c.TrailerAccepted = true
	}
	head, err := b.Head(ctx, obj)
	if err != nil {
		return c, fmt.Errorf("probing the store: a HEAD of %s failed after its PUT: %w", b.name(obj), err)
	}
	c.ETagMD5 = put.ETag == md5hex && head.ETag == md5hex && head.Size == int64(len(body))
	trailerKept := head.CRC64NVME == crc && (put.CRC64NVME == "" || put.CRC64NVME == crc)

	// 2. A checksum in a header: kept, and a wrong one refused?
	hobj := key("header-checksum")
	if _, err := b.rawPut(ctx, hobj, body, map[string]string{upload.ChecksumHeader: crc}); err == nil {
		if h, err := b.Head(ctx, hobj); err == nil && h.CRC64NVME == crc {
			wrong := key("wrong-checksum")
			_, werr := b.rawPut(ctx, wrong, body, map[string]string{upload.ChecksumHeader: upload.CRC64NVMEOf([]byte("other bytes"))})
			_, herr := b.Head(ctx, wrong)
			c.Checksums = werr != nil && errors.Is(herr, upload.ErrNotFound)
		}
	}
	c.TrailingChecksum = c.TrailerAccepted && trailerKept && c.Checksums

	// 3. A PUT without a checksum: does the store add its own?
	plain := key("no-checksum")
	if _, err := b.rawPut(ctx, plain, body, nil); err == nil {
		if h, err := b.Head(ctx, plain); err == nil {
			c.DefaultChecksum = h.CRC64NVME == crc
		}
	}

	// 4. A presigned PUT (signed for the endpoint the control plane uses).
	pre := key("presigned")
	if u, err := b.presignWith(ctx, b.Client, pre, int64(len(body)), time.Minute); err == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), bytes.NewReader(body))
		if err == nil {
			req.ContentLength = int64(len(body))
			if resp, err := client.Do(req); err == nil {
				_ = resp.Body.Close()
				if h, err := b.Head(ctx, pre); resp.StatusCode == http.StatusOK && err == nil && h.Size == int64(len(body)) {
					c.PresignedPut = true
				}
			}
		}
	}

	// 5. A server-side copy.
	cp := key("copy")
	if err := b.Copy(ctx, obj, cp); err == nil {
		if h, err := b.Head(ctx, cp); err == nil && h.Size == head.Size {
			c.Copy = !c.ETagMD5 || h.ETag == md5hex
			c.CopyKeepsChecksum = head.CRC64NVME != "" && h.CRC64NVME == head.CRC64NVME
		}
	}

	// 6. Conditional writes: each must be refused with 412, the object
	// left as it was.
	other := []byte("a second version, which no condition here lets in\n")
	_, err = b.rawPut(ctx, obj, other, map[string]string{"If-None-Match": "*"})
	c.IfNoneMatch = refusedPrecondition(err)
	_, err = b.rawPut(ctx, obj, other, map[string]string{"If-Match": `"` + strings.Repeat("0", 32) + `"`})
	c.IfMatch = refusedPrecondition(err)
	if c.Copy {
		err = b.copyIf(ctx, plain, cp, map[string]string{"If-None-Match": "*"})
		c.CopyIfNoneMatch = refusedPrecondition(err)
		err = b.copyIf(ctx, plain, cp, map[string]string{"If-Match": `"` + strings.Repeat("0", 32) + `"`})
		c.CopyIfMatch = refusedPrecondition(err)
	}
	if h, err := b.Head(ctx, obj); err != nil || h.Size != int64(len(body)) {
		// A store that let a conditional PUT through: not conditional.
		c.IfNoneMatch, c.IfMatch = false, false
	}
	if h, err := b.Head(ctx, cp); c.Copy && (err != nil || h.ETag != head.ETag && !(h.CRC64NVME != "" && h.CRC64NVME == head.CRC64NVME)) {
		c.CopyIfNoneMatch, c.CopyIfMatch = false, false
	}

	// 7. Multipart uploads.
	b.probeMultipart(ctx, key("multipart"), &c)
	return c, nil
}

// refusedPrecondition says whether err is a store's 412.
func refusedPrecondition(err error) bool {
	return errors.Is(err, ErrPrecondition) || minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed
}

// rawPut is one PUT of body with extra headers (a checksum, a condition).
func (b *S3Backend) rawPut(ctx context.Context, key string, body []byte, hdr map[string]string) (minio.UploadInfo, error) {
	opts := minio.PutObjectOptions{DisableMultipart: true, DisableContentSha256: true, ContentType: "application/octet-stream", UserMetadata: map[string]string{}}
	for k, v := range hdr {
		switch k {
		case "If-None-Match":
			opts.SetMatchETagExcept(strings.Trim(v, `"`))
		case "If-Match":
			opts.SetMatchETag(strings.Trim(v, `"`))
		default:
			opts.UserMetadata[k] = v
		}
	}
	md5b64 := ""
	if len(hdr) == 0 || hdr[upload.ChecksumHeader] == "" {
		// Without a checksum header minio-go would add its own (none: the
		// client sends no automatic one); a Content-MD5 keeps the request
		// a plain one every store takes.
		s := md5.Sum(body)
		md5b64 = base64.StdEncoding.EncodeToString(s[:])
	}
	return minio.Core{Client: b.Client}.PutObject(ctx, b.Bucket, b.name(key), bytes.NewReader(body), int64(len(body)), md5b64, "", opts)
}
