package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// probeMultipart finds the multipart capabilities with two uploads to key
// (which the caller deletes): one of a 5 MiB part (S3's smallest but the
// last) and a small one that asks for a full-object CRC-64/NVME, completed
// first with a wrong checksum, then with the right one; and, over the
// object it made, a one-part upload that asks for none, completed under
// conditions that do not hold, then without any. Every upload it leaves
// open is aborted.
func (b *S3Backend) probeMultipart(ctx context.Context, key string, c *Capabilities) {
	var ids []string
	defer func() {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, id := range ids {
			_ = b.AbortMultipart(actx, key, id)
		}
	}()
	first := bytes.Repeat([]byte("tether start-up probe: is a multipart upload's full-object CRC-64/NVME checked and kept?\n"), int(upload.MinPartSize/89+1))[:upload.MinPartSize]
	tail := []byte("the last part of the probe's multipart upload\n")
	crc := crcOfParts(first, tail)
	id, parts, err := b.probeUpload(ctx, key, true, first, tail)
	if id != "" {
		ids = append(ids, id)
	}
	if err != nil {
		return
	}
	// A store that takes a wrong checksum does not check it.
	_, werr := b.complete(ctx, key, id, parts, upload.CRC64NVMEOf([]byte("other bytes")), nil)
	_, herr := b.Head(ctx, key)
	refused := werr != nil && errors.Is(herr, upload.ErrNotFound)
	if _, err := b.complete(ctx, key, id, parts, crc, nil); err != nil {
		return
	}
	h, err := b.Head(ctx, key)
	if err != nil {
		return
	}
	c.MultipartChecksum = refused && h.CRC64NVME == crc && h.Size == int64(len(first)+len(tail))

	id, parts, err = b.probeUpload(ctx, key, false, tail)
	if id != "" {
		ids = append(ids, id)
	}
	if err != nil {
		return
	}
	_, err = b.complete(ctx, key, id, parts, "", map[string]string{"If-None-Match": "*"})
	c.MultipartIfNoneMatch = refusedPrecondition(err)
	_, err = b.complete(ctx, key, id, parts, "", map[string]string{"If-Match": `"` + strings.Repeat("0", 32) + `"`})
	c.MultipartIfMatch = refusedPrecondition(err)
	if h2, err := b.Head(ctx, key); err != nil || h2.ETag != h.ETag || h2.Size != h.Size {
		// A completion that went through: not conditional.
		c.MultipartIfNoneMatch, c.MultipartIfMatch = false, false
		return
	}
	if _, err := b.complete(ctx, key, id, parts, "", nil); err == nil {
		h3, err := b.Head(ctx, key)
		c.MultipartDefaultChecksum = err == nil && h3.CRC64NVME == upload.CRC64NVMEOf(tail) && h3.Size == int64(len(tail))
	}
}

// probeUpload creates an upload to key (withChecksum: asking for a
// full-object CRC-64/NVME) and stores bodies as its parts.
func (b *S3Backend) probeUpload(ctx context.Context, key string, withChecksum bool, bodies ...[]byte) (string, []objects.Part, error) {
	id, err := b.createMultipart(ctx, key, withChecksum)
	if err != nil {
		return "", nil, err
	}
	parts := make([]objects.Part, len(bodies))
	for i, body := range bodies {
		if parts[i], err = b.PutPart(ctx, key, id, i+1, bytes.NewReader(body), int64(len(body))); err != nil {
			return id, nil, err
		}
	}
	return id, parts, nil
}

// crcOfParts is the CRC-64/NVME of the concatenation of parts.
func crcOfParts(parts ...[]byte) string {
	h := upload.NewCRC64NVME()
	for _, p := range parts {
		_, _ = h.Write(p)
	}
	return upload.EncodeChecksum(h.Sum(nil))
}

// staleProbeAge is how old a probe's upload must be for a later probe to
// abort it: far longer than a probe takes (the control plane bounds one to a
// minute), so another replica's probe in flight is never touched.
const staleProbeAge = 10 * time.Minute

// abortStaleProbes aborts the uploads earlier probes left open (their
// replica killed mid-probe): their keys name when they began.
func (b *S3Backend) abortStaleProbes(ctx context.Context, now time.Time) {
	ups, err := b.ListMultipartUploads(ctx, ProbePrefix)
	if err != nil {
		return
	}
	for _, u := range ups {
		stamp, _, _ := strings.Cut(strings.TrimPrefix(u.Key, ProbePrefix), "-")
		began, err := time.Parse("20060102T150405Z", stamp)
		if err == nil && now.Sub(began) > staleProbeAge {
			_ = b.AbortMultipart(ctx, u.Key, u.ID)
		}
	}
}

// probeBase is a new probe's key prefix (its start time and a random part),
// once stale probes' uploads are aborted.
func (b *S3Backend) probeBase(ctx context.Context) string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	now := time.Now().UTC()
	b.abortStaleProbes(ctx, now)
	return ProbePrefix + now.Format("20060102T150405Z") + "-" + hex.EncodeToString(r[:]) + "/"
}
