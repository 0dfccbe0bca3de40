package endpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// frontedEnv is a Handler on an S3 server behind the tests' front
// (test/framework/s3server.Front), verifying as the start-up probe chose.
func frontedEnv(t *testing.T, v *storetest.S3, fault s3server.Fault) (*env, *s3server.Front, s3store.Choice) {
	t.Helper()
	b, f := v.NewFrontedBackend(t, fault)
	caps, err := b.Probe(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := caps.Choose()
	if err != nil {
		t.Fatalf("%+v: %v", caps, err)
	}
	b.Use(ch)
	e := newEnv(t, b, func(h *Handler, _ *httptest.Server) { h.Store = store.New(b, store.Options{}) })
	return e, f, ch
}

// manifestWith lists files with both digests (what a sidecar writes now),
// or the MD5 alone (a sidecar before the checksum).
func manifestWith(t *testing.T, files map[string][]byte, withCRC bool) []byte {
	t.Helper()
	m := upload.Manifest{Version: upload.ManifestVersion, JobID: "job-a", PodUID: testPod}
	for p, b := range files {
		f := upload.ManifestFile{Path: p, Size: int64(len(b)), MD5: md5hex(b)}
		if withCRC {
			f.CRC64NVME = upload.CRC64NVMEOf(b)
		}
		m.Files = append(m.Files, f)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func (e *env) putManifest(raw []byte) (status int, verified string) {
	e.t.Helper()
	resp := e.raw("PUT", "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(raw), int64(len(raw)), nil)
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(names.HeaderManifestVerified)
}

// putTrailer uploads data as a sidecar streams a large file: aws-chunked,
// its CRC-64/NVME in the trailer.
func (e *env) putTrailer(key string, data []byte) (minio.UploadInfo, error) {
	return minio.Core{Client: e.minio(tokenA, nil)}.PutObject(context.Background(), upload.Bucket, key, bytes.NewReader(data), int64(len(data)), "", "",
		minio.PutObjectOptions{DisableMultipart: true, Checksum: minio.ChecksumCRC64NVME})
}

// An SSE-KMS-like store (ETags rewritten to random hex, as AWS answers
// for SSE-KMS objects): every upload, proxied or direct, is verified by the
// store's CRC-64/NVME, manifests listing it verify, promotion moves what
// they list; a manifest without checksums (an older sidecar) is never
// verified there.
func TestSSEKMSLikeStore(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		e, _, ch := frontedEnv(t, v, s3server.FaultRandomETag)
		if !ch.Verification.ByChecksum {
			t.Fatalf("choice %+v: want verification by checksum", ch)
		}
		files := map[string][]byte{"plain.bin": data(200<<10, 1), "trailer.bin": data(300<<10, 2), "small.txt": data(100, 3)}
		if _, err := e.put(e.minio(tokenA, nil), "job-a/plain.bin", files["plain.bin"]); err != nil {
			t.Fatalf("plain PUT: %v", err)
		}
		if info, err := e.putTrailer("job-a/trailer.bin", files["trailer.bin"]); err != nil || info.ETag != md5hex(files["trailer.bin"]) ||
			info.ChecksumCRC64NVME != upload.CRC64NVMEOf(files["trailer.bin"]) {
			t.Fatalf("PUT with a trailing checksum: %+v %v", info, err)
		}
		small := files["small.txt"]
		if _, err := e.put(e.minio(tokenA, nil), "job-a/small.txt", small, func(o *minio.PutObjectOptions) { o.SendContentMd5 = true }); err != nil {
			t.Fatalf("small PUT: %v", err)
		}
		for p, d := range files {
			info := e.head("job-a/" + p)
			if info == nil || info.ETag == md5hex(d) || info.CRC64NVME != upload.CRC64NVMEOf(d) {
				t.Fatalf("%s stored %+v: want a random ETag and the CRC-64/NVME %s", p, info, upload.CRC64NVMEOf(d))
			}
		}
		// A new version goes pending; the manifest lists it.
		files["plain.bin"] = data(200<<10, 9)
		if _, err := e.put(e.minio(tokenA, nil), "job-a/plain.bin", files["plain.bin"]); err != nil {
			t.Fatal(err)
		}
		if p := e.head(objects.PendingKey("job-a/plain.bin")); p == nil || p.CRC64NVME != upload.CRC64NVMEOf(files["plain.bin"]) {
			t.Fatalf("pending %+v", p)
		}
		if st, ok := e.putManifest(manifestWith(t, files, false)); st != 200 || ok != "false" {
			t.Fatalf("a manifest without checksums: %d verified %q, want 200 false", st, ok)
		}
		raw := manifestWith(t, files, true)
		if st, ok := e.putManifest(raw); st != 200 || ok != "true" {
			t.Fatalf("manifest: %d verified %q, want true (%+v)", st, ok, e.manifests)
		}
		last := e.manifests[len(e.manifests)-1]
		if _, err := e.h.Store.Promote(t.Context(), "job-a", []pending.VerifiedManifest{{Rank: 0, SHA256: verify.ManifestDigest(raw)}}); err != nil {
			t.Fatalf("promote: %v (%+v)", err, last)
		}
		if p := e.head("job-a/plain.bin"); p == nil || p.CRC64NVME != upload.CRC64NVMEOf(files["plain.bin"]) {
			t.Fatalf("promoted %+v", p)
		}

		// Direct: where the store checksums a PUT made without one.
		body := data(2<<20, 4)
		a := e.authorizeDirect(tokenA, "job-a/direct.bin", int64(len(body)))
		if !ch.Direct {
			if a.Mode != upload.ModeProxy {
				t.Fatalf("authorize %+v: the store cannot verify a presigned PUT, want proxy", a)
			}
			return
		}
		if a.Mode != upload.ModeDirect || a.Verify != upload.VerifyCRC64NVME {
			t.Fatalf("authorize %+v: want direct, verified by crc64nvme", a)
		}
		if resp := presignedPut(t, a, body, int64(len(body))); resp.StatusCode != http.StatusOK {
			t.Fatalf("presigned PUT: %d", resp.StatusCode)
		}
		bad := upload.CommitRequest{Key: "job-a/direct.bin", Size: int64(len(body)), MD5: md5hex(body), CRC64NVME: upload.CRC64NVMEOf([]byte("x")), Upload: a.Upload}
		wantError(t, e.postJSON(upload.PathCommit, tokenA, bad), http.StatusBadRequest, "BadDigest")
		a = e.authorizeDirect(tokenA, "job-a/direct.bin", int64(len(body)))
		if resp := presignedPut(t, a, body, int64(len(body))); resp.StatusCode != http.StatusOK {
			t.Fatalf("presigned PUT: %d", resp.StatusCode)
		}
		good := upload.CommitRequest{Key: "job-a/direct.bin", Size: int64(len(body)), MD5: md5hex(body), CRC64NVME: upload.CRC64NVMEOf(body), Upload: a.Upload}
		c := decodeJSON[upload.CommitResponse](t, e.postJSON(upload.PathCommit, tokenA, good))
		if c.ETag != md5hex(body) || c.CRC64NVME != upload.CRC64NVMEOf(body) {
			t.Fatalf("commit %+v", c)
		}
	})
}

// A store that lies about what it holds (a wrong ETag, or a wrong
// checksum, for the body it was sent) never gets a file marked verified:
// the PUT is refused and nothing is kept, and a manifest over an object it
// now lies about is not verified.
func TestLyingStore(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		for _, tc := range []struct {
			name         string
			probed, lies s3server.Fault
		}{
			{"wrong-etag", s3server.FaultNone, s3server.FaultWrongETag},
			{"wrong-checksum", s3server.FaultNone, s3server.FaultWrongChecksum},
			{"sse-kms-like/wrong-checksum", s3server.FaultRandomETag, s3server.FaultRandomETag | s3server.FaultWrongChecksum},
		} {
			t.Run(tc.name, func(t *testing.T) {
				e, f, _ := frontedEnv(t, v, tc.probed)
				files := map[string][]byte{"a.bin": data(70<<10, 1)}
				if _, err := e.put(e.minio(tokenA, nil), "job-a/a.bin", files["a.bin"]); err != nil {
					t.Fatal(err)
				}
				f.SetFault(tc.lies)
				_, err := e.put(e.minio(tokenA, nil), "job-a/b.bin", data(80<<10, 2))
				wantMinioError(t, err, 500, "InternalError")
				_, err = e.putTrailer("job-a/c.bin", data(90<<10, 3))
				wantMinioError(t, err, 500, "InternalError")
				f.SetFault(tc.probed)
				e.wantAbsent("job-a/b.bin")
				e.wantAbsent("job-a/c.bin")
				f.SetFault(tc.lies)
				if st, ok := e.putManifest(manifestWith(t, files, true)); st == 200 && ok != "false" {
					t.Fatalf("manifest over a lying store: %d verified %q", st, ok)
				}
				e.mu.Lock()
				defer e.mu.Unlock()
				for _, c := range e.verified {
					if c.key != "job-a/a.bin" {
						t.Errorf("verified %s on a lying store", c.key)
					}
				}
				for _, m := range e.manifests {
					if m.Verified {
						t.Errorf("manifest %+v verified on a lying store", m)
					}
				}
			})
		}
	})
}
