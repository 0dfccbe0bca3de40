package s3store_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"hash/crc64"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// s3Answer is what a store answered: status, S3 error code, headers.
type s3Answer struct {
	status int
	code   string
	header http.Header
}

// signedRequest sends a SigV4-signed request (unsigned payload) to key in
// b's bucket, with hdr, straight to the store.
func signedRequest(t *testing.T, v *storetest.S3, b *s3store.S3Backend, method, key string, body []byte, hdr map[string]string) s3Answer {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+v.Endpoint+"/"+b.Bucket+"/"+key, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	for k, val := range hdr {
		req.Header.Set(k, val)
	}
	return doS3(t, signer.SignV4(*req, v.Access, v.Secret, "", "us-east-1"))
}

func doS3(t *testing.T, req *http.Request) s3Answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var e struct{ Code string }
	_ = xml.Unmarshal(raw, &e)
	return s3Answer{status: resp.StatusCode, code: e.Code, header: resp.Header}
}

// crc64nvme is the base64 CRC-64/NVME of b (x-amz-checksum-crc64nvme):
// the reflected polynomial 0x9a6c9329ac4bc9b5, initial value and final xor
// all ones, which is what hash/crc64 computes with that table.
func crc64nvme(b []byte) string {
	sum := make([]byte, 8)
	binary.BigEndian.PutUint64(sum, crc64.Checksum(b, crc64.MakeTable(0x9a6c9329ac4bc9b5)))
	return base64.StdEncoding.EncodeToString(sum)
}

// TestS3ServerBehaviour pins what each S3 server does where Tether's
// verification, direct uploads and conditional writes depend on S3's
// documented behaviour (AWS's S3 API reference), and where it differs
// from AWS (each difference is written in docs/artifacts.md, "S3 servers
// and AWS"). A new version of a server that changes any of it fails here.
func TestS3ServerBehaviour(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		b := v.NewBackend(t, "")
		body := []byte("the bytes of one artifact")
		sum := md5.Sum(body)
		etag := hex.EncodeToString(sum[:])
		other := md5.Sum([]byte("other bytes"))
		b64 := base64.StdEncoding.EncodeToString
		want := func(name string, got s3Answer, status int, code string) {
			t.Helper()
			if got.status != status || got.code != code {
				t.Errorf("%s: %d %q, want %d %q", name, got.status, got.code, status, code)
			}
		}
		wantETag := func(name string, got s3Answer, md5hex string) {
			t.Helper()
			if e := trimQuotes(got.header.Get("ETag")); got.status != http.StatusOK || e != md5hex {
				t.Errorf("%s: %d ETag %q, want 200 and the MD5 %s", name, got.status, e, md5hex)
			}
		}
		put := func(key string, data []byte, hdr map[string]string) s3Answer {
			return signedRequest(t, v, b, http.MethodPut, key, data, hdr)
		}
		head := func(key string, hdr map[string]string) s3Answer {
			return signedRequest(t, v, b, http.MethodHead, key, nil, hdr)
		}
		copyTo := func(dst, src string, hdr map[string]string) s3Answer {
			h := map[string]string{"X-Amz-Copy-Source": "/" + b.Bucket + "/" + src}
			for k, val := range hdr {
				h[k] = val
			}
			return put(dst, nil, h)
		}

		// A single PUT's ETag is the body's MD5 (AWS: without SSE-KMS or
		// SSE-C), also past SeaweedFS's 4 MiB chunks, and so is a copy's.
		wantETag("PUT", put("a", body, nil), etag)
		wantETag("HEAD", head("a", nil), etag)
		big := data(9<<20+3, 5)
		wantETag("PUT of 9 MiB", put("big", big, nil), md5hex(big))
		copyTo("big-copy", "big", nil)
		wantETag("HEAD of a copy", head("big-copy", nil), md5hex(big))

		// Content-MD5: a wrong one is BadDigest, a malformed one
		// InvalidDigest, and nothing is stored.
		want("PUT, wrong Content-MD5", put("md5", body, map[string]string{"Content-MD5": b64(other[:])}), 400, "BadDigest")
		want("PUT, malformed Content-MD5", put("md5", body, map[string]string{"Content-MD5": "not-base64"}), 400, "InvalidDigest")
		want("HEAD after refused PUTs", head("md5", nil), 404, "")

		// Flexible checksums: verified (BadDigest), stored, returned by a
		// HEAD with x-amz-checksum-mode: ENABLED.
		want("PUT, wrong CRC64NVME", put("crc", body, map[string]string{"X-Amz-Checksum-Crc64nvme": b64(make([]byte, 8))}), 400, "BadDigest")
		want("HEAD after a refused checksum", head("crc", nil), 404, "")
		want("PUT, right CRC64NVME", put("crc", body, map[string]string{"X-Amz-Checksum-Crc64nvme": crc64nvme(body)}), 200, "")
		if got := head("crc", map[string]string{"X-Amz-Checksum-Mode": "ENABLED"}).header.Get("X-Amz-Checksum-Crc64nvme"); got != crc64nvme(body) {
			t.Errorf("HEAD with checksum mode: CRC64NVME %q, want the one sent, %q", got, crc64nvme(body))
		}
		// AWS adds a CRC64NVME to an object PUT without a checksum; so
		// does versitygw; SeaweedFS stores none.
		defaultSum := head("a", map[string]string{"X-Amz-Checksum-Mode": "ENABLED"}).header.Get("X-Amz-Checksum-Crc64nvme")
		if wantSum := map[s3server.Impl]string{s3server.VersityGW: crc64nvme(body), s3server.SeaweedFS: ""}[v.Impl]; defaultSum != wantSum {
			t.Errorf("default CRC64NVME of an object PUT without a checksum: %q, want %q (AWS: %q)", defaultSum, wantSum, crc64nvme(body))
		}

		// Conditional PUTs: If-None-Match: * and If-Match.
		want("PUT If-None-Match: * over an object", put("a", []byte("x"), map[string]string{"If-None-Match": "*"}), 412, "PreconditionFailed")
		want("PUT If-None-Match: * on a free key", put("new", []byte("x"), map[string]string{"If-None-Match": "*"}), 200, "")
		want("PUT If-Match, another ETag", put("a", []byte("x"), map[string]string{"If-Match": `"` + hex.EncodeToString(other[:]) + `"`}), 412, "PreconditionFailed")
		want("PUT If-Match on a free key", put("free", []byte("x"), map[string]string{"If-Match": `"` + etag + `"`}), 404, "NoSuchKey")
		want("PUT If-Match, the ETag", put("a", body, map[string]string{"If-Match": `"` + etag + `"`}), 200, "")
		wantETag("HEAD after the conditional PUTs", head("a", nil), etag)

		// Conditional copies: the source's x-amz-copy-source-if-match
		// everywhere; the destination's If-None-Match / If-Match (AWS
		// refuses with 412) SeaweedFS honours, versitygw v1.8.0 ignores
		// and overwrites.
		want("copy, x-amz-copy-source-if-match another ETag", copyTo("c1", "a", map[string]string{"X-Amz-Copy-Source-If-Match": `"` + hex.EncodeToString(other[:]) + `"`}), 412, "PreconditionFailed")
		put("dst", []byte("x"), nil)
		copyWant, copyCode := 412, "PreconditionFailed"
		if v.Impl == s3server.VersityGW {
			copyWant, copyCode = 200, ""
		}
		want("copy If-None-Match: * over an object", copyTo("dst", "a", map[string]string{"If-None-Match": "*"}), copyWant, copyCode)
		want("copy If-Match another ETag", copyTo("dst", "big", map[string]string{"If-Match": `"` + hex.EncodeToString(other[:]) + `"`}), copyWant, copyCode)
		dstWant := md5hex([]byte("x"))
		if v.Impl == s3server.VersityGW {
			dstWant = md5hex(big)
		}
		wantETag("HEAD of the conditional copies' destination", head("dst", nil), dstWant)

		// A presigned PUT signs Content-Length: any other length is
		// SignatureDoesNotMatch; an unsigned Content-MD5 is still checked.
		for _, n := range []int{len(body) - 1, len(body) + 1} {
			u, _, err := b.PresignPut(context.Background(), "pre", int64(len(body)), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPut, u.String(), bytes.NewReader(data(n, 1)))
			req.ContentLength = int64(n)
			want("presigned PUT of another length", doS3(t, req), 403, "SignatureDoesNotMatch")
		}
		u, _, err := b.PresignPut(context.Background(), "pre", int64(len(body)), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPut, u.String(), bytes.NewReader(body))
		req.Header.Set("Content-MD5", b64(other[:]))
		want("presigned PUT, wrong Content-MD5", doS3(t, req), 400, "BadDigest")
		want("HEAD after refused presigned PUTs", head("pre", nil), 404, "")
		req, _ = http.NewRequest(http.MethodPut, u.String(), bytes.NewReader(body))
		wantETag("presigned PUT", doS3(t, req), etag)

		want("GET of a free key", signedRequest(t, v, b, http.MethodGet, "free", nil, nil), 404, "NoSuchKey")
	})
}
