package s3store_test

import (
	"bytes"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// mpStore is a bucket's multipart uploads through minio-go's Core, as the
// stores answer them (no retries past what minio-go does, no mapping).
type mpStore struct {
	t    *testing.T
	b    *s3store.S3Backend
	core minio.Core
}

// create starts an upload; fullObject asks for a FULL_OBJECT CRC64NVME.
func (m mpStore) create(key string, fullObject bool) string {
	m.t.Helper()
	opts := minio.PutObjectOptions{}
	if fullObject {
		opts.UserMetadata = map[string]string{"X-Amz-Checksum-Algorithm": "CRC64NVME", "X-Amz-Checksum-Type": "FULL_OBJECT"}
	}
	id, err := m.core.NewMultipartUpload(m.t.Context(), m.b.Bucket, key, opts)
	if err != nil {
		m.t.Fatalf("create multipart upload %s: %v", key, err)
	}
	return id
}

// put stores body as part n, without a checksum of its own.
func (m mpStore) put(key, id string, n int, body []byte) minio.ObjectPart {
	m.t.Helper()
	p, err := m.core.PutObjectPart(m.t.Context(), m.b.Bucket, key, id, n, bytes.NewReader(body), int64(len(body)), minio.PutObjectPartOptions{DisableContentSha256: true})
	if err != nil {
		m.t.Fatalf("upload part %d of %s: %v", n, key, err)
	}
	return p
}

// listed is the store's list of the upload's parts.
func (m mpStore) listed(key, id string) []minio.ObjectPart {
	m.t.Helper()
	r, err := m.core.ListObjectParts(m.t.Context(), m.b.Bucket, key, id, 0, 0)
	if err != nil {
		m.t.Fatalf("list parts of %s: %v", key, err)
	}
	return r.ObjectParts
}

// complete completes the upload with parts (each with the checksum the
// store listed for it if withPartCRCs), claiming crc ("": none) under
// conditions.
func (m mpStore) complete(key, id string, withPartCRCs bool, crc string, cond map[string]string) (minio.UploadInfo, minio.ErrorResponse) {
	m.t.Helper()
	var cps []minio.CompletePart
	seen := map[int]bool{}
	for _, p := range m.listed(key, id) {
		if seen[p.PartNumber] {
			continue
		}
		seen[p.PartNumber] = true
		cp := minio.CompletePart{PartNumber: p.PartNumber, ETag: p.ETag}
		if withPartCRCs {
			cp.ChecksumCRC64NVME = p.ChecksumCRC64NVME
		}
		cps = append(cps, cp)
	}
	return m.completeParts(key, id, cps, crc, cond)
}

// completeParts completes the upload with cps, claiming crc ("": none)
// under conditions.
func (m mpStore) completeParts(key, id string, cps []minio.CompletePart, crc string, cond map[string]string) (minio.UploadInfo, minio.ErrorResponse) {
	m.t.Helper()
	opts := minio.PutObjectOptions{}
	if crc != "" {
		opts.UserMetadata = map[string]string{upload.ChecksumHeader: crc, "X-Amz-Checksum-Type": "FULL_OBJECT"}
	}
	for k, v := range cond {
		if k == "If-None-Match" {
			opts.SetMatchETagExcept(v)
		} else {
			opts.SetMatchETag(v)
		}
	}
	ui, err := m.core.CompleteMultipartUpload(m.t.Context(), m.b.Bucket, key, id, cps, opts)
	return ui, minio.ToErrorResponse(err)
}

func (m mpStore) head(key string) upload.ObjectInfo {
	m.t.Helper()
	info, err := m.b.Head(m.t.Context(), key)
	if err != nil {
		m.t.Fatalf("HEAD %s: %v", key, err)
	}
	return info
}

// TestS3ServerMultipartBehaviour pins what each S3 server does with the
// multipart uploads the backend makes (a FULL_OBJECT CRC64NVME asked at
// creation, parts without checksums of their own, the whole object's
// claimed at completion), where it differs from AWS's documented
// behaviour (docs/artifacts.md, "S3 servers and AWS").
func TestS3ServerMultipartBehaviour(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		b := v.NewBackend(t, "")
		m := mpStore{t: t, b: b, core: minio.Core{Client: b.Client}}
		versity := v.Impl == s3server.VersityGW
		first, tail := data(int(upload.MinPartSize), 1), data(1000, 2)
		whole := append(append([]byte{}, first...), tail...)
		crc := upload.CRC64NVMEOf(whole)
		etag := storetest.Parts{first, tail}.ETag()

		// Parts without checksums are taken; a part's ETag is its MD5;
		// versitygw computes each part's CRC64NVME, SeaweedFS lists none.
		id := m.create("mp", true)
		if p := m.put("mp", id, 1, first); trimQuotes(p.ETag) != md5hex(first) {
			t.Errorf("part ETag %s, want the MD5 %s", p.ETag, md5hex(first))
		}
		m.put("mp", id, 2, tail)
		if got := m.listed("mp", id)[0].ChecksumCRC64NVME; (got == upload.CRC64NVMEOf(first)) != versity || !versity && got != "" {
			t.Errorf("listed part 1 with CRC64NVME %q", got)
		}
		// A completion without the parts' checksums: versitygw refuses it
		// (as AWS does for an upload with a checksum algorithm);
		// SeaweedFS takes it.
		if !versity {
			id2 := m.create("mp-no-part-crcs", true)
			m.put("mp-no-part-crcs", id2, 1, first)
			m.put("mp-no-part-crcs", id2, 2, tail)
			if _, e := m.complete("mp-no-part-crcs", id2, false, crc, nil); e.Code != "" || m.head("mp-no-part-crcs").CRC64NVME != crc {
				t.Errorf("completion without the parts' checksums: %d %s, want it taken and the CRC kept", e.StatusCode, e.Code)
			}
		} else if _, e := m.complete("mp", id, false, crc, nil); e.StatusCode != 400 || e.Code != "InvalidRequest" {
			t.Errorf("completion without the parts' checksums: %d %s, want 400 InvalidRequest", e.StatusCode, e.Code)
		}
		// A wrong full-object checksum: 400 BadDigest, nothing stored, the
		// upload still open.
		if _, e := m.complete("mp", id, true, upload.CRC64NVMEOf([]byte("other bytes")), nil); e.StatusCode != 400 || e.Code != "BadDigest" {
			t.Errorf("completion with a wrong CRC64NVME: %d %s, want 400 BadDigest", e.StatusCode, e.Code)
		}
		if _, err := b.Head(t.Context(), "mp"); err == nil {
			t.Error("an object after the refused completion")
		}
		ui, e := m.complete("mp", id, true, crc, nil)
		if want := (upload.ObjectInfo{Size: int64(len(whole)), ETag: etag, CRC64NVME: crc}); e.Code != "" || ui.ChecksumCRC64NVME != crc || m.head("mp") != want {
			t.Errorf("completion: %+v %d %s, HEAD %+v, want %+v", ui, e.StatusCode, e.Code, m.head("mp"), want)
		}

		checkPartCopy(t, m, versity, whole, crc, etag)
		checkUnaskedAndRepeatedParts(t, m, versity)
		checkCompletionConditions(t, m, etag) // last: it replaces mp
	})
}

// checkCompletionConditions: If-None-Match: * over an object and If-Match
// another ETag are refused (412), the object kept; If-Match its ETag is
// taken.
func checkCompletionConditions(t *testing.T, m mpStore, etag string) {
	for _, cond := range []map[string]string{{"If-None-Match": "*"}, {"If-Match": md5hex([]byte("other"))}, {"If-Match": etag}} {
		id := m.create("mp", false)
		m.put("mp", id, 1, []byte("small"))
		_, e := m.complete("mp", id, false, "", cond)
		if taken := cond["If-Match"] == etag; taken != (e.Code == "") || !taken && e.StatusCode != 412 {
			t.Errorf("completion with %v: %d %s", cond, e.StatusCode, e.Code)
		}
		_ = m.core.AbortMultipartUpload(m.t.Context(), m.b.Bucket, "mp", id)
	}
}

// checkPartCopy: UploadPartCopy ranges honour x-amz-copy-source-if-match.
// Into an upload that asked for CRC64NVME, versitygw records each copied
// part's checksum as the whole source's and then refuses the right
// full-object one (hence Choice.CopyPartsUnasked); into one that asked for
// none it computes the right one. SeaweedFS records each part's own.
func checkPartCopy(t *testing.T, m mpStore, versity bool, whole []byte, crc, etag string) {
	src := map[string]string{"x-amz-copy-source-if-match": `"` + etag + `"`}
	for _, asked := range []bool{true, false} {
		id := m.create("copy", asked)
		ranges := [][2]int64{{0, upload.MinPartSize}, {upload.MinPartSize, int64(len(whole)) - upload.MinPartSize}}
		for n, r := range ranges {
			cp, err := m.core.CopyObjectPart(m.t.Context(), m.b.Bucket, "mp", m.b.Bucket, "copy", id, n+1, r[0], r[1], src)
			if err != nil {
				t.Fatalf("copy part %d: %v", n+1, err)
			}
			if want := upload.CRC64NVMEOf(whole[r[0] : r[0]+r[1]]); asked && (cp.ChecksumCRC64NVME == crc) != versity || asked && !versity && cp.ChecksumCRC64NVME != want {
				t.Errorf("copied part %d (asked %v) with CRC64NVME %q", n+1, asked, cp.ChecksumCRC64NVME)
			}
		}
		claim := crc
		if !asked {
			claim = ""
		}
		_, e := m.complete("copy", id, true, claim, nil)
		if refused := asked && versity; refused != (e.Code == "BadDigest") || !refused && e.Code != "" {
			t.Errorf("completion of the copy (asked %v): %d %s", asked, e.StatusCode, e.Code)
		}
		if got, err := m.b.Head(m.t.Context(), "copy"); e.Code == "" && (err != nil || got.CRC64NVME != crc && (asked || versity)) {
			t.Errorf("HEAD of the copy (asked %v): %+v %v, want CRC64NVME %s", asked, got, err, crc)
		}
		_ = m.core.AbortMultipartUpload(m.t.Context(), m.b.Bucket, "copy", id)
	}
	if _, err := m.core.CopyObjectPart(m.t.Context(), m.b.Bucket, "mp", m.b.Bucket, "copy", m.create("copy", true), 1, 0, 10,
		map[string]string{"x-amz-copy-source-if-match": `"` + md5hex([]byte("other")) + `-2"`}); minio.ToErrorResponse(err).StatusCode != 412 {
		t.Errorf("copy part of another source version: %v, want 412", err)
	}
}

// checkUnaskedAndRepeatedParts: an upload that asked for no checksum gets
// the full-object CRC64NVME on versitygw, none on SeaweedFS; a part number
// stored twice is listed once by versitygw, twice by SeaweedFS, whose
// completion takes the one it names.
func checkUnaskedAndRepeatedParts(t *testing.T, m mpStore, versity bool) {
	body, other := data(int(upload.MinPartSize), 3), data(int(upload.MinPartSize), 4)
	id := m.create("plain", false)
	m.put("plain", id, 1, other)
	m.put("plain", id, 1, body)
	if n := len(m.listed("plain", id)); n != 1 && versity || n != 2 && !versity {
		t.Errorf("a part stored twice is listed %d times", n)
	}
	if _, e := m.completeParts("plain", id, []minio.CompletePart{{PartNumber: 1, ETag: md5hex(body)}}, "", nil); e.Code != "" {
		t.Fatalf("completion: %d %s", e.StatusCode, e.Code)
	}
	got := m.head("plain")
	if want := (storetest.Parts{body}).ETag(); got.ETag != want {
		t.Errorf("ETag %s, want %s (the part named)", got.ETag, want)
	}
	if versity && got.CRC64NVME != upload.CRC64NVMEOf(body) || !versity && got.CRC64NVME != "" {
		t.Errorf("an upload that asked for no checksum: CRC64NVME %q", got.CRC64NVME)
	}
	if _, err := m.core.ListObjectParts(m.t.Context(), m.b.Bucket, "plain", "0123456789abcdef0123456789abcdef", 0, 0); minio.ToErrorResponse(err).Code != "NoSuchUpload" {
		t.Errorf("list parts of an unknown upload: %v, want NoSuchUpload", err)
	}
}
