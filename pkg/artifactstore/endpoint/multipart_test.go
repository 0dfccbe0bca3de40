package endpoint

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// The multipart path runs on small files: a 5 MiB threshold and 5 MiB
// parts (S3's smallest), so a 12 MiB file is three parts.
const testPart = upload.MinPartSize

func TestMultipartFS(t *testing.T) {
	runMultipartSuite(t, func(t *testing.T) upload.Backend { return fsstore.FSBackend{Root: t.TempDir()} })
}

func TestMultipartS3(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		// Probed once per server; each case's backend uses its choice.
		caps, err := v.NewBackend(t, "").Probe(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := caps.Choose()
		if err != nil {
			t.Fatal(err)
		}
		if !ch.Multipart {
			t.Fatalf("the probe says %s cannot verify multipart objects (%s); both test servers keep a full-object CRC-64/NVME", v.Impl, ch.Why)
		}
		runMultipartSuite(t, func(t *testing.T) upload.Backend {
			b := v.NewBackend(t, "")
			b.Use(ch)
			return b
		})
	})
}

func runMultipartSuite(t *testing.T, newBackend func(t *testing.T) upload.Backend) {
	tests := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"MultipartRoundTrip", testMultipartRoundTrip},
		{"MultipartResumesAfterStoredParts", testMultipartResume},
		{"MultipartResumeRefusedForOtherBytes", testMultipartResumeMismatch},
		{"MultipartNewUploadStartsOver", testMultipartStartsOver},
		{"MultipartBadChecksumKeepsNothing", testMultipartBadChecksum},
		{"MultipartPartETagMismatch", testMultipartPartETagMismatch},
		{"MultipartStoreUnavailableKeepsParts", testMultipartStoreUnavailable},
		{"MultipartLargeUploadsBounded", testMultipartBound},
		{"MultipartManifestVerifies", testMultipartManifest},
		{"MultipartResumeOtherJobRefused", testMultipartOtherJob},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, newBackend(t), func(h *Handler, _ *httptest.Server) {
				h.Store = store.New(h.Store.Backend(), store.Options{Multipart: store.MultipartOptions{Threshold: testPart, PartSize: testPart, MaxConcurrent: 1}})
			})
			if objects.MultipartOf(e.backend) == nil {
				t.Fatal("the backend cannot store in parts")
			}
			tc.run(t, e)
		})
	}
}

// bigData is n pseudo-random bytes (no two parts alike, unlike data's
// repeating pattern: a part stored for another would be caught).
func bigData(n int, seed byte) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// partsETag is the multipart ETag of b cut into testPart parts.
func partsETag(b []byte) string {
	var sums [][]byte
	for off := 0; off < len(b); off += int(testPart) {
		s := md5.Sum(b[off:min(off+int(testPart), len(b))])
		sums = append(sums, s[:])
	}
	return upload.MultipartETag(sums)
}

// wantStoredInParts checks key holds b, stored in parts, and that nothing
// of its upload is left open or recorded.
func (e *env) wantStoredInParts(key string, b []byte) {
	e.t.Helper()
	info := e.head(key)
	if info == nil {
		e.t.Fatalf("%s: not stored", key)
	}
	if info.Size != int64(len(b)) || info.CRC64NVME != upload.CRC64NVMEOf(b) {
		e.t.Fatalf("%s: stored %+v, want %d bytes with CRC-64/NVME %s", key, *info, len(b), upload.CRC64NVMEOf(b))
	}
	if upload.IsMultipartETag(info.ETag) && info.ETag != partsETag(b) {
		e.t.Fatalf("%s: ETag %s, want %s", key, info.ETag, partsETag(b))
	}
	rc, _, err := e.backend.Open(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, b) {
		e.t.Fatalf("%s: read back %d bytes (err %v), not what was sent", key, len(got), err)
	}
	e.wantNoOpenUploads("job-a/")
}

func (e *env) wantNoOpenUploads(prefix string) {
	e.t.Helper()
	ups, err := e.backend.ListMultipartUploads(context.Background(), prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(ups) != 0 {
		e.t.Fatalf("open uploads left under %s: %+v", prefix, ups)
	}
	if keys := e.list(objects.MultipartStatePrefix("job-a")); len(keys) != 0 {
		e.t.Fatalf("multipart records left: %v", keys)
	}
}

// inParts is the header of a client that verifies objects in parts.
var inParts = http.Header{names.HeaderMultipart: {"1"}}

// putInParts PUTs b as the sidecar does: one streaming PUT, its
// CRC-64/NVME in an aws-chunked trailer, saying it verifies objects in
// parts.
func (e *env) putInParts(key string, b []byte) (minio.UploadInfo, error) {
	return minio.Core{Client: e.minio(tokenA, inParts)}.PutObject(context.Background(), upload.Bucket, key, bytes.NewReader(b), int64(len(b)), "", "",
		minio.PutObjectOptions{DisableMultipart: true, Checksum: minio.ChecksumCRC64NVME})
}

func testMultipartRoundTrip(t *testing.T, e *env) {
	const key = "job-a/model/shard-00001.safetensors"
	b := bigData(int(2*testPart+7000), 1)
	info, err := e.putInParts(key, b)
	if err != nil {
		t.Fatal(err)
	}
	if info.ChecksumCRC64NVME != upload.CRC64NVMEOf(b) {
		t.Fatalf("answer's checksum %q, want %q", info.ChecksumCRC64NVME, upload.CRC64NVMEOf(b))
	}
	if !upload.IsMultipartETag(info.ETag) && info.ETag != md5hex(b) {
		t.Fatalf("answer's ETag %q is neither a multipart ETag nor the MD5", info.ETag)
	}
	e.wantStoredInParts(key, b)
	// A client that does not say it verifies objects in parts (a sidecar
	// from before them) gets a single PUT whose ETag is the MD5.
	old := bigData(int(2*testPart+1), 15)
	e.mustPut("job-a/old-sidecar.bin", old)
	e.wantObject("job-a/old-sidecar.bin", old)
	// A body under the threshold is one PUT, as always.
	small := bigData(int(testPart-1), 2)
	e.mustPut("job-a/small.bin", small)
	e.wantObject("job-a/small.bin", small)
}

// resumePoint asks where key's upload of size bytes resumes.
func (e *env) resumePoint(token, key string, size int64) (upload.ResumeResponse, *http.Response) {
	e.t.Helper()
	raw, _ := json.Marshal(upload.ResumeRequest{Key: key, Size: size})
	resp := e.raw("POST", upload.PathResume, token, bytes.NewReader(raw), int64(len(raw)), nil)
	var r upload.ResumeResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			e.t.Fatal(err)
		}
	}
	return r, resp
}

// putCut sends key a body of b that ends (the connection is cut) after n
// bytes, and waits until the endpoint has handled it.
func (e *env) putCut(key string, b []byte, n int) {
	e.t.Helper()
	before := e.started.Load()
	conn := e.rawTLS()
	u := strings.TrimPrefix(e.srv.URL, "https://")
	head := "PUT /" + upload.Bucket + "/" + key + " HTTP/1.1\r\nHost: " + u + "\r\n" +
		names.HeaderArtifactToken + ": " + tokenA + "\r\n" + names.HeaderArtifactPodUID + ": " + testPod + "\r\n" +
		names.HeaderMultipart + ": 1\r\n" +
		"Content-Length: " + strconv.Itoa(len(b)) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		e.t.Fatal(err)
	}
	if _, err := conn.Write(b[:n]); err != nil {
		e.t.Fatal(err)
	}
	conn.Close()
	e.waitHandled(before)
}

// putResumed sends b's bytes from r.Offset on as a resumed PUT.
func (e *env) putResumed(key string, b []byte, offset int64, crc string) *http.Response {
	e.t.Helper()
	hd := http.Header{}
	hd.Set(names.HeaderMultipart, "1")
	hd.Set(names.HeaderResumeOffset, strconv.FormatInt(offset, 10))
	hd.Set(names.HeaderResumeCRC64NVME, crc)
	rest := b[offset:]
	return e.raw("PUT", "/"+upload.Bucket+"/"+key, tokenA, bytes.NewReader(rest), int64(len(rest)), hd)
}

func testMultipartResume(t *testing.T, e *env) {
	const key = "job-a/ckpt/rank0.distcp"
	b := bigData(int(3*testPart+123), 3)
	// Cut after one and a half parts: the first part is stored.
	e.putCut(key, b, int(testPart+testPart/2))
	e.wantAbsent(key)
	r, resp := e.resumePoint(tokenA, key, int64(len(b)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	if r.Offset != testPart || r.CRC64NVME != upload.CRC64NVMEOf(b[:testPart]) || r.PartSize != testPart {
		t.Fatalf("resume answered %+v, want offset %d with the first part's checksum", r, testPart)
	}
	// Another size is another upload: nothing to resume.
	if r2, _ := e.resumePoint(tokenA, key, int64(len(b)+1)); r2.Offset != 0 {
		t.Fatalf("resume for another size answered %+v", r2)
	}
	readBefore := e.bodyReads.Load()
	resp = e.putResumed(key, b, r.Offset, r.CRC64NVME)
	if resp.StatusCode != http.StatusOK {
		wantError(t, resp, http.StatusOK, "")
	}
	if got := resp.Header.Get(upload.ChecksumHeader); got != upload.CRC64NVMEOf(b) {
		t.Fatalf("resumed PUT answered checksum %q, want the whole object's %q", got, upload.CRC64NVMEOf(b))
	}
	if sent := e.bodyReads.Load() - readBefore; sent != int64(len(b))-testPart {
		t.Fatalf("the resumed PUT carried %d bytes, want %d", sent, int64(len(b))-testPart)
	}
	e.wantStoredInParts(key, b)
}

func testMultipartResumeMismatch(t *testing.T, e *env) {
	const key = "job-a/ckpt/rank1.distcp"
	b := bigData(int(2*testPart+99), 4)
	e.putCut(key, b, int(testPart+10))
	r, _ := e.resumePoint(tokenA, key, int64(len(b)))
	if r.Offset != testPart {
		t.Fatalf("resume answered %+v", r)
	}
	// The file was rewritten: its first bytes have another checksum.
	other := bigData(len(b), 5)
	resp := e.putResumed(key, other, r.Offset, upload.CRC64NVMEOf(other[:testPart]))
	msg := wantError(t, resp, http.StatusConflict, "InvalidUpload")
	if !strings.Contains(msg.Message, upload.PathResume) {
		t.Fatalf("the refusal does not say how to go on: %q", msg.Message)
	}
	e.wantAbsent(key)
	// An offset that is not a part's end.
	resp = e.putResumed(key, b, r.Offset+1, r.CRC64NVME)
	wantError(t, resp, http.StatusConflict, "InvalidUpload")
	e.wantAbsent(key)
	// The stored parts are still there to resume after.
	if r2, _ := e.resumePoint(tokenA, key, int64(len(b))); r2.Offset != testPart {
		t.Fatalf("after refusals, resume answered %+v", r2)
	}
}

func testMultipartStartsOver(t *testing.T, e *env) {
	const key = "job-a/ckpt/optimizer.pt"
	old := bigData(int(2*testPart+1), 6)
	e.putCut(key, old, int(testPart+1))
	// The file was rewritten and is sent whole: the old parts are dropped,
	// the object is the new file alone.
	b := bigData(len(old), 7)
	if _, err := e.putInParts(key, b); err != nil {
		t.Fatal(err)
	}
	e.wantStoredInParts(key, b)
}

func testMultipartBadChecksum(t *testing.T, e *env) {
	const key = "job-a/ckpt/bad.bin"
	b := bigData(int(2*testPart+5), 8)
	other := bigData(len(b), 9)
	_, err := e.put(e.minio(tokenA, inParts), key, b, func(o *minio.PutObjectOptions) {
		o.UserMetadata = map[string]string{upload.ChecksumHeader: upload.CRC64NVMEOf(other)}
	})
	wantMinioError(t, err, http.StatusBadRequest, "BadDigest")
	e.wantAbsent(key)
	// Nothing is left to resume after: those parts had unverified bytes.
	e.wantNoOpenUploads("job-a/")
	if r, _ := e.resumePoint(tokenA, key, int64(len(b))); r.Offset != 0 {
		t.Fatalf("resume after a refused body answered %+v", r)
	}
}

func testMultipartPartETagMismatch(t *testing.T, e *env) {
	const key = "job-a/ckpt/lying.bin"
	b := bigData(int(2*testPart+5), 10)
	e.backend.liePart.Store(true)
	_, err := e.putInParts(key, b)
	wantMinioError(t, err, http.StatusInternalServerError, "InternalError")
	e.wantAbsent(key)
	e.backend.liePart.Store(false)
	// The part the store misreported is not resumed after.
	if r, _ := e.resumePoint(tokenA, key, int64(len(b))); r.Offset != 0 {
		t.Fatalf("resume after a mismatched part answered %+v", r)
	}
	if _, err := e.putInParts(key, b); err != nil {
		t.Fatal(err)
	}
	e.wantStoredInParts(key, b)
}

func testMultipartStoreUnavailable(t *testing.T, e *env) {
	const key = "job-a/ckpt/slow.bin"
	b := bigData(int(3*testPart+5), 11)
	// The store stores two parts, then answers 503.
	e.backend.failParts.Store(2)
	_, err := e.putInParts(key, b)
	wantMinioError(t, err, http.StatusServiceUnavailable, "SlowDown")
	e.backend.failParts.Store(0)
	r, _ := e.resumePoint(tokenA, key, int64(len(b)))
	if r.Offset != 2*testPart {
		t.Fatalf("resume answered %+v, want the two stored parts", r)
	}
	if resp := e.putResumed(key, b, r.Offset, r.CRC64NVME); resp.StatusCode != http.StatusOK {
		wantError(t, resp, http.StatusOK, "")
	}
	e.wantStoredInParts(key, b)
}

func testMultipartBound(t *testing.T, e *env) {
	b := bigData(int(testPart+1), 12)
	// One large upload streams (its body held back); a second is refused
	// before its body, with Retry-After.
	pr, pw := io.Pipe()
	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("PUT", e.srv.URL+"/"+upload.Bucket+"/job-a/first.bin", pr)
		req.ContentLength = int64(len(b))
		req.Header.Set(names.HeaderArtifactToken, tokenA)
		req.Header.Set(names.HeaderArtifactPodUID, testPod)
		req.Header.Set(names.HeaderMultipart, "1")
		resp, err := (&http.Client{Transport: e.transport()}).Do(req)
		if err != nil {
			done <- nil
			return
		}
		done <- resp
	}()
	if _, err := pw.Write(b[:1000]); err != nil { // the first bytes reached the handler
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); e.bodyReads.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first upload's body never reached the handler")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp := e.raw("PUT", "/"+upload.Bucket+"/job-a/second.bin", tokenA, bytes.NewReader(b), int64(len(b)), inParts)
	wantError(t, resp, http.StatusServiceUnavailable, "SlowDown")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	if _, err := pw.Write(b[1000:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if r := <-done; r == nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the first upload: %+v", r)
	}
	e.wantStoredInParts("job-a/first.bin", b)
}

func testMultipartManifest(t *testing.T, e *env) {
	const path = "model/model-00001-of-00002.safetensors"
	b := bigData(int(2*testPart+3), 13)
	if _, err := e.putInParts("job-a/"+path, b); err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(b)
	m := upload.Manifest{Version: upload.ManifestVersion, JobID: "job-a", PodUID: testPod, Files: []upload.ManifestFile{
		{Path: path, Size: int64(len(b)), MD5: md5hex(b), CRC64NVME: upload.CRC64NVMEOf(b)},
	}}
	raw, _ := json.Marshal(m)
	e.mustPut("job-a/"+upload.ManifestName, raw)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.manifests) != 1 || !e.manifests[0].Verified {
		t.Fatalf("manifest listing a file stored in parts (MD5 %x): %+v", sum, e.manifests)
	}
}

func testMultipartOtherJob(t *testing.T, e *env) {
	const key = "job-a/ckpt/theirs.bin"
	b := bigData(int(2*testPart+1), 14)
	e.putCut(key, b, int(testPart+1))
	// Another job's token learns nothing of this job's upload.
	_, resp := e.resumePoint(tokenB, key, int64(len(b)))
	wantError(t, resp, http.StatusForbidden, "AccessDenied")
	hd := http.Header{}
	hd.Set(names.HeaderResumeOffset, strconv.FormatInt(testPart, 10))
	hd.Set(names.HeaderResumeCRC64NVME, upload.CRC64NVMEOf(b[:testPart]))
	rest := b[testPart:]
	resp = e.raw("PUT", "/"+upload.Bucket+"/"+key, tokenB, bytes.NewReader(rest), int64(len(rest)), hd)
	wantError(t, resp, http.StatusForbidden, "AccessDenied")
	e.wantAbsent(key)
}
