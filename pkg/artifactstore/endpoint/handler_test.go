package endpoint

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// TestHandlerFS runs the handler suite with the FSBackend.
func TestHandlerFS(t *testing.T) {
	runHandlerSuite(t, func(t *testing.T) upload.Backend { return fsstore.FSBackend{Root: t.TempDir()} })
}

// runHandlerSuite runs every handler test against fresh backends from
// newBackend, over HTTPS with minio-go (or net/http where minio-go would not
// send the request).
func runHandlerSuite(t *testing.T, newBackend func(t *testing.T) upload.Backend) {
	tests := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"RoundTrip", testRoundTrip},
		{"ChecksumHeaders", testChecksumHeaders},
		{"BadDigest", testBadDigest},
		{"RefusedBeforeBody", testRefusedBeforeBody},
		{"Traversal", testTraversal},
		{"OddNames", testOddNames},
		{"Pending", testPending},
		{"SameContentNoWrite", testSameContentNoWrite},
		{"Manifest", testManifest},
		{"MalformedManifest", testMalformedManifest},
		{"BodyFailsMidStream", testBodyFailsMidStream},
		{"ShortBody", testShortBody},
		{"ETagMismatch", testETagMismatch},
		{"Head", testHead},
		{"RequestShape", testRequestShape},
		{"Concurrent", testConcurrent},
		{"ManifestVerdictNotRecorded", testManifestVerdictNotRecorded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, newEnv(t, newBackend(t)))
		})
	}
}

func testRoundTrip(t *testing.T, e *env) {
	c := e.minio(tokenA, nil)
	for _, size := range []int{0, 1, 1234, 5 << 20} {
		key := fmt.Sprintf("job-a/ckpt/size-%d.bin", size)
		body := data(size, byte(size))
		info, err := e.put(c, key, body)
		if err != nil {
			t.Fatalf("PUT %d bytes: %v", size, err)
		}
		if info.ETag != md5hex(body) {
			t.Fatalf("PUT %d bytes: ETag %s, want %s", size, info.ETag, md5hex(body))
		}
		st, err := c.StatObject(context.Background(), upload.Bucket, key, minio.StatObjectOptions{})
		if err != nil {
			t.Fatalf("StatObject: %v", err)
		}
		if st.Size != int64(size) || st.ETag != md5hex(body) || st.LastModified.IsZero() {
			t.Fatalf("StatObject: size %d ETag %s modified %v", st.Size, st.ETag, st.LastModified)
		}
		e.wantObject(key, body)
	}
	// Content-MD5 computed by minio-go.
	body := data(4096, 9)
	if _, err := e.put(c, "job-a/with-md5", body, func(o *minio.PutObjectOptions) { o.SendContentMd5 = true }); err != nil {
		t.Fatal(err)
	}
	e.wantObject("job-a/with-md5", body)
	if got := e.list("job-a/"); len(got) != 5 {
		t.Fatalf("stored keys %q, want 5", got)
	}
	if len(e.verified) != 5 || e.verified[3].key != "job-a/ckpt/size-5242880.bin" ||
		e.verified[3].info != (upload.ObjectInfo{Size: 5 << 20, ETag: md5hex(data(5<<20, 0)), CRC64NVME: upload.CRC64NVMEOf(data(5<<20, 0))}) || e.verified[3].job.JobID != "job-a" {
		t.Fatalf("OnVerified calls %+v", e.verified)
	}
}

func testChecksumHeaders(t *testing.T, e *env) {
	body := data(1000, 3)
	crc := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))
	good := base64.StdEncoding.EncodeToString([]byte{byte(crc >> 24), byte(crc >> 16), byte(crc >> 8), byte(crc)})
	bad := base64.StdEncoding.EncodeToString([]byte{1, 2, 3, 4})
	// minio-go sends x-amz-checksum-* only with TrailingHeaders (aws-chunked,
	// refused); other S3 clients send the header with a plain body.
	withCRC := func(v string) *minio.Client {
		return e.minio(tokenA, http.Header{"X-Amz-Checksum-Crc32c": {v}})
	}
	if _, err := e.put(withCRC(good), "job-a/crc-good", body); err != nil {
		t.Fatal(err)
	}
	e.wantObject("job-a/crc-good", body)
	_, err := e.put(withCRC(bad), "job-a/crc-bad", body)
	wantMinioError(t, err, 400, "BadDigest")
	e.wantAbsent("job-a/crc-bad")
}

func testBadDigest(t *testing.T, e *env) {
	body := data(70000, 1)
	wrong := md5.Sum([]byte("something else"))
	c := e.minio(tokenA, http.Header{"Content-Md5": {base64.StdEncoding.EncodeToString(wrong[:])}})
	_, err := e.put(c, "job-a/model.pt", body)
	wantMinioError(t, err, 400, "BadDigest")
	e.wantAbsent("job-a/model.pt")
	_, err = e.minio(tokenA, nil).StatObject(context.Background(), upload.Bucket, "job-a/model.pt", minio.StatObjectOptions{})
	wantMinioError(t, err, 404, "NoSuchKey")

	// Over an existing object: the object stays, nothing pending.
	old := data(100, 2)
	e.mustPut("job-a/model.pt", old)
	_, err = e.put(c, "job-a/model.pt", body)
	wantMinioError(t, err, 400, "BadDigest")
	e.wantObject("job-a/model.pt", old)
	e.wantAbsent(objects.PendingKey("job-a/model.pt"))

	// A malformed Content-MD5 is refused before the body is read.
	e.bodyReads.Store(0)
	resp := e.raw("PUT", "/tether-artifacts/job-a/x", tokenA, bytes.NewReader(body), int64(len(body)), http.Header{"Content-Md5": {"not base64!"}})
	wantError(t, resp, 400, "InvalidDigest")
	e.inflight.Wait()
	if n := e.bodyReads.Load(); n != 0 {
		t.Fatalf("the handler read %d body bytes", n)
	}
}

// recordingReader records whether the client's transport read the body.
type recordingReader struct {
	r     io.Reader
	reads int
}

func (r *recordingReader) Read(p []byte) (int, error) {
	r.reads++
	return r.r.Read(p)
}

func testRefusedBeforeBody(t *testing.T, e *env) {
	body := data(1<<20, 5)
	cases := []struct {
		name, key, token string
		status           int
		code             string
	}{
		{"no token", "job-a/x.bin", "", 401, "AccessDenied"},
		{"malformed token", "job-a/x.bin", "ABC", 401, "AccessDenied"},
		{"uppercase token", "job-a/x.bin", strings.ToUpper(tokenA), 401, "AccessDenied"},
		{"unknown token", "job-a/x.bin", tokenNone, 401, "AccessDenied"},
		{"other job's prefix", "job-b/x.bin", tokenA, 403, "AccessDenied"},
		{"finished binding", "job-done/x.bin", tokenDone, 403, "AccessDenied"},
		{"authorizer down", "job-a/x.bin", tokenDown, 503, "ServiceUnavailable"},
		{"reserved", "job-a/.tether/pending/x.bin", tokenA, 403, "AccessDenied"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.bodyReads.Store(0)
			rec := &recordingReader{r: bytes.NewReader(body)}
			req, _ := http.NewRequest("PUT", e.srv.URL+"/tether-artifacts/"+tc.key, rec)
			req.ContentLength = int64(len(body))
			// With Expect: 100-continue the client sends the body only
			// once the server asks for it, i.e. when the handler reads.
			req.Header.Set("Expect", "100-continue")
			if tc.token != "" {
				req.Header.Set(names.HeaderArtifactToken, tc.token)
				req.Header.Set(names.HeaderArtifactPodUID, testPod)
			}
			tr := e.transport()
			tr.ExpectContinueTimeout = 10 * time.Second
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			er := wantError(t, resp, tc.status, tc.code)
			if er.Key != tc.key {
				t.Fatalf("error Key %q, want %q", er.Key, tc.key)
			}
			e.inflight.Wait()
			if n := e.bodyReads.Load(); n != 0 {
				t.Fatalf("the handler read %d body bytes", n)
			}
			if rec.reads != 0 {
				t.Fatalf("the client sent the body (%d reads)", rec.reads)
			}
			e.wantAbsent(tc.key)
		})
	}
	// minio-go sees the same refusals.
	_, err := e.put(e.minio("", nil), "job-a/x.bin", body)
	wantMinioError(t, err, 401, "AccessDenied")
	_, err = e.put(e.minio(tokenA, nil), "job-b/x.bin", body)
	wantMinioError(t, err, 403, "AccessDenied")
	if len(e.verified) != 0 {
		t.Fatalf("OnVerified called: %+v", e.verified)
	}
}

func testTraversal(t *testing.T, e *env) {
	e.mustPut("job-a/x", []byte("x"))
	long := "job-a/" + strings.Repeat(strings.Repeat("l", 200)+"/", 4) + strings.Repeat("m", upload.MaxKeyLength-6-4*201)
	cases := []struct {
		path   string // after /tether-artifacts/
		status int
		code   string
	}{
		{"job-a/../x", 400, "InvalidArgument"},
		{"job-a/./x", 400, "InvalidArgument"},
		{"job-a//x", 400, "InvalidArgument"},
		{"job-a/x/", 400, "InvalidArgument"},
		{"job-a/sub/../../job-b/x", 400, "InvalidArgument"},
		{"../job-a/x", 400, "InvalidArgument"},
		{"/job-a/x", 400, "InvalidArgument"},
		{"job-a/%2e%2e/x", 400, "InvalidArgument"},
		{"job-a%2F..%2Fx", 400, "InvalidArgument"},
		{"job-a/%00x", 400, "InvalidArgument"},
		{"job-a/%ff%fe", 400, "InvalidArgument"},
		{"job-a", 400, "InvalidArgument"},
		{"", 400, "InvalidRequest"},
		{"job-a/.tether/x", 403, "AccessDenied"},
		{"job-a/.tether", 403, "AccessDenied"},
		{long + "m", 400, "KeyTooLongError"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			e.bodyReads.Store(0)
			resp := e.raw("PUT", "/tether-artifacts/"+tc.path, tokenA, strings.NewReader("evil"), 4, nil)
			wantError(t, resp, tc.status, tc.code)
			e.inflight.Wait()
			if n := e.bodyReads.Load(); n != 0 {
				t.Fatalf("the handler read %d body bytes", n)
			}
		})
	}
	if got := e.list(""); !slices.Equal(got, []string{"job-a/x"}) {
		t.Fatalf("stored keys %q, want only job-a/x", got)
	}
	e.wantObject("job-a/x", []byte("x"))
	// The longest key is fine.
	if len(long) != upload.MaxKeyLength {
		t.Fatalf("test key is %d bytes", len(long))
	}
	e.mustPut(long, []byte("long"))
}

func testOddNames(t *testing.T, e *env) {
	keys := []string{
		"job-a/with space/and  two.bin",
		"job-a/ünïcødé/文件 📦.pt",
		"job-a/-leading-dash",
		"job-a/--",
		"job-a/q?u#e%20r&y=+;.txt",
		"job-a/.hidden",
		"job-a/...",
		"job-a/sub/.tether/nested-is-fine",
		"job-a/" + upload.ManifestName + ".bak",
		"job-a/tab\there",
	}
	for i, k := range keys {
		e.mustPut(k, data(10+i, byte(i)))
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	got := e.list("job-a/")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("stored keys\n%q\nwant\n%q", got, want)
	}
	c := e.minio(tokenA, nil)
	for i, k := range keys {
		st, err := c.StatObject(context.Background(), upload.Bucket, k, minio.StatObjectOptions{})
		if err != nil || st.ETag != md5hex(data(10+i, byte(i))) {
			t.Fatalf("StatObject %q: %v %+v", k, err, st)
		}
	}
}

func testPending(t *testing.T, e *env) {
	const key = "job-a/ckpt/latest.pt"
	pkey := objects.PendingKey(key)
	if pkey != "job-a/.tether/pending/ckpt/latest.pt" {
		t.Fatalf("PendingKey = %q", pkey)
	}
	v1, v2, v3 := data(3000, 1), data(3000, 2), data(10, 3)
	e.mustPut(key, v1)
	e.wantObject(key, v1)
	e.wantAbsent(pkey)

	// A different upload goes to pending; the response still has its ETag.
	e.mustPut(key, v2)
	e.wantObject(key, v1)
	e.wantObject(pkey, v2)
	// HEAD answers with the latest upload.
	resp := e.raw("HEAD", "/tether-artifacts/"+key, tokenA, nil, 0, nil)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"`+md5hex(v2)+`"` || resp.Header.Get(names.HeaderPending) != "true" {
		t.Fatalf("HEAD: %d %v", resp.StatusCode, resp.Header)
	}

	// The same content as the final object: a no-op that drops the pending
	// object (the latest upload wins).
	e.mustPut(key, v1)
	e.wantObject(key, v1)
	e.wantAbsent(pkey)

	// Promote moves what the verified manifest lists over the final
	// objects, and nothing else: a later version of a listed file and an
	// unlisted pending object are dropped.
	e.mustPut(key, v2)
	e.mustPut("job-a/other", v3)
	e.mustPut("job-a/other", v1)
	e.mustPut("job-a/unlisted", v3)
	e.mustPut("job-a/unlisted", v2)
	e.mustPut("job-a/"+upload.ManifestName, manifestJSON(t, map[string][]byte{"ckpt/latest.pt": v2, "other": v1}, []string{"ckpt/latest.pt", "other"}))
	verdict := e.manifests[len(e.manifests)-1]
	if !verdict.Verified || len(verdict.SHA256) != 64 {
		t.Fatalf("manifest verdict %+v, want verified with its SHA-256", verdict)
	}
	vm := []pending.VerifiedManifest{{Rank: 0, SHA256: verdict.SHA256}}
	e.mustPut(key, v3) // after the verdict: replaces the pending v2
	if _, err := e.h.Store.Promote(context.Background(), "job-a", vm); !isNotAsListed(err, "ckpt/latest.pt") {
		t.Fatalf("Promote with the listed version overwritten: %v, want a pending.NotAsListedError naming ckpt/latest.pt", err)
	}
	e.wantObject(key, v1)
	e.mustPut(key, v2) // the listed version again, then a later one is kept apart
	e.mustPut(key, v1)
	e.wantAbsent(pkey)
	e.mustPut(key, v2)
	n, err := e.h.Store.Promote(context.Background(), "job-a", vm)
	if err != nil || n != 2 {
		t.Fatalf("Promote: %d, %v", n, err)
	}
	e.wantObject(key, v2)
	e.wantObject("job-a/other", v1)
	e.wantObject("job-a/unlisted", v3)
	if got := e.list("job-a/.tether/"); len(got) != 0 {
		t.Fatalf("pending after Promote: %q", got)
	}
	if n, err := e.h.Store.Promote(context.Background(), "job-a", vm); err != nil || n != 0 {
		t.Fatalf("second Promote: %d, %v", n, err)
	}
	// A manifest rewritten behind the verdict is not promoted from.
	if _, err := e.h.Store.Promote(context.Background(), "job-a", []pending.VerifiedManifest{{Rank: 0, SHA256: strings.Repeat("0", 64)}}); !isNotAsListed(err, upload.ManifestName) {
		t.Fatalf("Promote with another manifest digest: %v", err)
	}

	// DropPending keeps the final objects.
	e.mustPut(key, v3)
	e.wantObject(pkey, v3)
	n, err = e.h.Store.DropPending(context.Background(), "job-a")
	if err != nil || n != 1 {
		t.Fatalf("DropPending: %d, %v", n, err)
	}
	e.wantObject(key, v2)
	e.wantAbsent(pkey)

	// Another job's pendings are its own.
	e.mustPut(key, v1)
	if n, err := e.h.Store.DropPending(context.Background(), "job-b"); err != nil || n != 0 {
		t.Fatalf("DropPending(job-b): %d, %v", n, err)
	}
	e.wantObject(pkey, v1)
	if _, err := e.h.Store.Promote(context.Background(), "../job-a", nil); !errors.Is(err, objects.ErrInvalidKey) {
		t.Fatalf("Promote(../job-a): %v", err)
	}
}

func testSameContentNoWrite(t *testing.T, e *env) {
	const key = "job-a/same.bin"
	body := data(5000, 7)
	e.mustPut(key, body)
	e.mustPut(key, data(5000, 8)) // pending
	puts := e.backend.puts.Load()
	// With Content-MD5 equal to the stored ETag the body is verified but not
	// written, and the pending object is dropped.
	info, err := e.put(e.minio(tokenA, nil), key, body, func(o *minio.PutObjectOptions) { o.SendContentMd5 = true })
	if err != nil || info.ETag != md5hex(body) {
		t.Fatalf("PUT: %v %+v", err, info)
	}
	if n := e.backend.puts.Load() - puts; n != 0 {
		t.Fatalf("%d backend PUTs, want 0", n)
	}
	e.wantObject(key, body)
	e.wantAbsent(objects.PendingKey(key))
	// A body that does not match its Content-MD5 is still refused.
	wrong := md5.Sum(body)
	c := e.minio(tokenA, http.Header{"Content-Md5": {base64.StdEncoding.EncodeToString(wrong[:])}})
	_, err = e.put(c, key, data(5000, 9))
	wantMinioError(t, err, 400, "BadDigest")
	e.wantObject(key, body)
	e.wantAbsent(objects.PendingKey(key))

	// With Content-MD5 equal to the pending object (the latest upload) the
	// body is not written either, and the pending object stays: it is what
	// the key holds once the binding succeeds.
	newer := data(5000, 10)
	e.mustPut(key, newer)
	e.wantObject(objects.PendingKey(key), newer)
	puts = e.backend.puts.Load()
	info, err = e.put(e.minio(tokenA, nil), key, newer, func(o *minio.PutObjectOptions) { o.SendContentMd5 = true })
	if err != nil || info.ETag != md5hex(newer) {
		t.Fatalf("PUT of the pending content: %v %+v", err, info)
	}
	if n := e.backend.puts.Load() - puts; n != 0 {
		t.Fatalf("%d backend PUTs of the pending content, want 0", n)
	}
	e.wantObject(key, body)
	e.wantObject(objects.PendingKey(key), newer)
}

func isNotAsListed(err error, path string) bool {
	var nl *pending.NotAsListedError
	return errors.As(err, &nl) && nl.Path == path
}

// manifestJSON is job-a's manifest listing files in order, from its node 0's
// pod.
func manifestJSON(t *testing.T, files map[string][]byte, order []string) []byte {
	t.Helper()
	m := upload.Manifest{Version: upload.ManifestVersion, JobID: "job-a", PodUID: testPod}
	for _, p := range order {
		m.Files = append(m.Files, upload.ManifestFile{Path: p, Size: int64(len(files[p])), MD5: md5hex(files[p])})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testManifest(t *testing.T, e *env) {
	files := map[string][]byte{
		"ckpt/step-100.pt":       data(20000, 1),
		"logs/train.log":         data(0, 0),
		"config with space.yaml": data(77, 3),
		"never-uploaded.bin":     data(5, 5),
		"replaced.bin":           data(64, 6),
	}
	for _, p := range []string{"ckpt/step-100.pt", "logs/train.log", "config with space.yaml"} {
		e.mustPut("job-a/"+p, files[p])
	}
	// replaced.bin: an older version is final, the manifest's is pending.
	e.mustPut("job-a/replaced.bin", data(64, 99))
	e.mustPut("job-a/replaced.bin", files["replaced.bin"])

	good := manifestJSON(t, files, []string{"ckpt/step-100.pt", "logs/train.log", "config with space.yaml", "replaced.bin"})
	resp := e.raw("PUT", "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(good), int64(len(good)), nil)
	if resp.StatusCode != 200 || resp.Header.Get(names.HeaderManifestVerified) != "true" || resp.Header.Get("ETag") != `"`+md5hex(good)+`"` {
		t.Fatalf("manifest PUT: %d %v", resp.StatusCode, resp.Header)
	}
	e.wantObject("job-a/manifest.json", good)
	if len(e.manifests) != 1 {
		t.Fatalf("OnManifest calls: %+v", e.manifests)
	}
	want := verify.ManifestResult{Key: "job-a/manifest.json", Files: 4, Bytes: 20000 + 0 + 77 + 64, Verified: true}
	if r := e.manifests[0]; r.Key != want.Key || r.Files != want.Files || r.Bytes != want.Bytes || !r.Verified || len(r.Missing) != 0 || r.Err != "" {
		t.Fatalf("result %+v, want %+v", r, want)
	}

	// A manifest naming a file that was never uploaded, and with minio-go.
	bad := manifestJSON(t, files, []string{"ckpt/step-100.pt", "never-uploaded.bin", "logs/train.log"})
	if _, err := e.put(e.minio(tokenA, nil), "job-a/manifest.json", bad); err != nil {
		t.Fatal(err)
	}
	r := e.manifests[1]
	if r.Verified || !slices.Equal(r.Missing, []string{"never-uploaded.bin"}) || !strings.Contains(r.Err, "never-uploaded.bin") || r.Files != 3 {
		t.Fatalf("result %+v", r)
	}
	// The second manifest differs from the first: it is pending like any object.
	e.wantObject(objects.PendingKey("job-a/manifest.json"), bad)

	// A file whose stored content differs from the manifest is missing too.
	files["logs/train.log"] = []byte("rewritten")
	diff := manifestJSON(t, files, []string{"logs/train.log", "config with space.yaml"})
	resp = e.raw("PUT", "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(diff), int64(len(diff)), nil)
	if resp.StatusCode != 200 || resp.Header.Get(names.HeaderManifestVerified) != "false" || resp.Header.Get(names.HeaderManifestMissing) != url.PathEscape("logs/train.log") {
		t.Fatalf("manifest PUT: %d %v", resp.StatusCode, resp.Header)
	}
	if r := e.manifests[2]; r.Verified || !slices.Equal(r.Missing, []string{"logs/train.log"}) || !strings.Contains(r.Err, "size") {
		t.Fatalf("result %+v", r)
	}

	// At most 10 missing files are listed, in manifest order.
	many := map[string][]byte{}
	var order []string
	for i := range 15 {
		p := fmt.Sprintf("gone-%02d", i)
		many[p] = []byte{byte(i)}
		order = append(order, p)
	}
	b := manifestJSON(t, many, order)
	if _, err := e.put(e.minio(tokenA, nil), "job-a/manifest.json", b); err != nil {
		t.Fatal(err)
	}
	if r := e.manifests[3]; r.Verified || !slices.Equal(r.Missing, order[:10]) || !strings.Contains(r.Err, "15 of 15") {
		t.Fatalf("result %+v", r)
	}
}

func testMalformedManifest(t *testing.T, e *env) {
	files := map[string][]byte{"a.bin": []byte("a")}
	e.mustPut("job-a/a.bin", files["a.bin"])
	valid := manifestJSON(t, files, []string{"a.bin"})
	cases := map[string]string{
		"not JSON":      "this is not json",
		"trailing data": string(valid) + " {}",
		"wrong version": `{"version":"v0","jobID":"job-a","files":[]}`,
		"wrong job":     `{"version":"v1","jobID":"job-b","files":[]}`,
		"traversal":     `{"version":"v1","jobID":"job-a","files":[{"path":"../job-b/x","size":1,"md5":"0cc175b9c0f1b6a831c399e269772661"}]}`,
		"reserved":      `{"version":"v1","jobID":"job-a","files":[{"path":".tether/pending/x","size":1,"md5":"0cc175b9c0f1b6a831c399e269772661"}]}`,
		"bad md5":       `{"version":"v1","jobID":"job-a","files":[{"path":"a.bin","size":1,"md5":"0CC175B9C0F1B6A831C399E269772661"}]}`,
		"negative size": `{"version":"v1","jobID":"job-a","files":[{"path":"a.bin","size":-1,"md5":"0cc175b9c0f1b6a831c399e269772661"}]}`,
		"duplicate":     `{"version":"v1","jobID":"job-a","files":[{"path":"a.bin","size":1,"md5":"0cc175b9c0f1b6a831c399e269772661"},{"path":"a.bin","size":1,"md5":"0cc175b9c0f1b6a831c399e269772661"}]}`,
		"lists itself":  `{"version":"v1","jobID":"job-a","files":[{"path":"manifest.json","size":1,"md5":"0cc175b9c0f1b6a831c399e269772661"}]}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			n := len(e.manifests)
			_, err := e.put(e.minio(tokenA, nil), "job-a/manifest.json", []byte(body))
			wantMinioError(t, err, 400, "MalformedManifest")
			e.wantAbsent("job-a/manifest.json")
			if len(e.manifests) != n+1 || e.manifests[n].Verified || !strings.HasPrefix(e.manifests[n].Err, "malformed manifest: ") {
				t.Fatalf("OnManifest: %+v", e.manifests[n:])
			}
		})
	}
	// Unknown fields are ignored (a newer sidecar may add some).
	extended := strings.Replace(string(valid), `"files"`, `"sidecarVersion":"v9","files"`, 1)
	if _, err := e.put(e.minio(tokenA, nil), "job-a/manifest.json", []byte(extended)); err != nil {
		t.Fatal(err)
	}
	if r := e.manifests[len(e.manifests)-1]; !r.Verified {
		t.Fatalf("result %+v", r)
	}
	// A manifest over 16 MiB is refused before its body is read.
	e.bodyReads.Store(0)
	resp := e.raw("PUT", "/tether-artifacts/job-a/manifest.json", tokenA, io.LimitReader(zeros{}, upload.MaxManifestSize+1), upload.MaxManifestSize+1,
		http.Header{"Expect": {"100-continue"}})
	wantError(t, resp, 400, "EntityTooLarge")
	e.inflight.Wait()
	if n := e.bodyReads.Load(); n != 0 {
		t.Fatalf("the handler read %d body bytes", n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func testBodyFailsMidStream(t *testing.T, e *env) {
	const size = 3 << 20
	for _, key := range []string{"job-a/new.bin", "job-a/existing.bin"} {
		old := data(100, 1)
		if key == "job-a/existing.bin" {
			e.mustPut(key, old)
		}
		req, _ := http.NewRequest("PUT", e.srv.URL+"/tether-artifacts/"+key, &storetest.FailingReader{N: size / 2, Err: errors.New("disk read error")})
		req.ContentLength = size
		req.Header.Set(names.HeaderArtifactToken, tokenA)
		req.Header.Set(names.HeaderArtifactPodUID, testPod)
		n := e.started.Load()
		_, err := (&http.Client{Transport: e.transport()}).Do(req)
		if err == nil {
			t.Fatal("the request succeeded")
		}
		e.waitHandled(n)
		e.wantAbsent(objects.PendingKey(key))
		if key == "job-a/existing.bin" {
			e.wantObject(key, old)
		} else {
			e.wantAbsent(key)
		}
	}
	if got := e.list("job-a/"); !slices.Equal(got, []string{"job-a/existing.bin"}) {
		t.Fatalf("stored keys %q", got)
	}
	if len(e.verified) != 1 {
		t.Fatalf("OnVerified calls: %+v", e.verified)
	}
}

func testShortBody(t *testing.T, e *env) {
	// A client that closes its side after half the body: the handler sees
	// the body end early and answers 400 IncompleteBody.
	conn := e.rawTLS()
	u, _ := url.Parse(e.srv.URL)
	fmt.Fprintf(conn, "PUT /tether-artifacts/job-a/short.bin HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n%s: %s\r\nContent-Length: 1000\r\n\r\n", u.Host, names.HeaderArtifactToken, tokenA, names.HeaderArtifactPodUID, testPod)
	_, _ = conn.Write(make([]byte, 500))
	if err := conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	wantError(t, resp, 400, "IncompleteBody")
	e.inflight.Wait()
	e.wantAbsent("job-a/short.bin")
}

func testETagMismatch(t *testing.T, e *env) {
	e.backend.lieETag.Store(true)
	defer e.backend.lieETag.Store(false)
	_, err := e.put(e.minio(tokenA, nil), "job-a/lied.bin", data(1000, 1))
	wantMinioError(t, err, 500, "InternalError")
	e.wantAbsent("job-a/lied.bin")
	e.mu.Lock()
	defer e.mu.Unlock()
	if !strings.Contains(e.logs.String(), "the store's digests do not match the body") {
		t.Fatal("the ETag mismatch was not logged")
	}
}

func testHead(t *testing.T, e *env) {
	body := data(777, 4)
	e.mustPut("job-a/h.bin", body)
	resp := e.raw("HEAD", "/tether-artifacts/job-a/h.bin", tokenA, nil, 0, nil)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"`+md5hex(body)+`"` || resp.ContentLength != 777 || resp.Header.Get("Last-Modified") == "" {
		t.Fatalf("HEAD: %d %d %v", resp.StatusCode, resp.ContentLength, resp.Header)
	}
	// A finished binding may still read its objects.
	if resp := e.raw("HEAD", "/tether-artifacts/job-done/h.bin", tokenDone, nil, 0, nil); resp.StatusCode != 404 {
		t.Fatalf("HEAD of a finished job: %d", resp.StatusCode)
	}
	for _, tc := range []struct {
		path, token string
		status      int
	}{
		{"job-a/missing", tokenA, 404},
		{"job-a/h.bin", "", 401},
		{"job-b/h.bin", tokenB, 404},
		{"job-a/h.bin", tokenB, 403},
		{"job-a/../h.bin", tokenA, 400},
	} {
		resp := e.raw("HEAD", "/tether-artifacts/"+tc.path, tc.token, nil, 0, nil)
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || len(b) != 0 {
			t.Fatalf("HEAD %s: %d %q, want %d and no body", tc.path, resp.StatusCode, b, tc.status)
		}
	}
}

func testRequestShape(t *testing.T, e *env) {
	for _, m := range []string{"GET", "DELETE", "POST", "OPTIONS", "PATCH"} {
		resp := e.raw(m, "/tether-artifacts/job-a/x", tokenA, strings.NewReader("x"), 1, nil)
		wantError(t, resp, 405, "MethodNotAllowed")
	}
	resp := e.raw("PUT", "/other-bucket/job-a/x", tokenA, strings.NewReader("x"), 1, nil)
	if resp.StatusCode != 404 { // not the artifact bucket: the binding server's mux
		t.Fatalf("other bucket: %d", resp.StatusCode)
	}
	resp = e.raw("PUT", "/tether-artifactsX/job-a/x", tokenA, strings.NewReader("x"), 1, nil)
	if resp.StatusCode != 404 {
		t.Fatalf("other bucket: %d", resp.StatusCode)
	}
	// Chunked: no Content-Length.
	resp = e.raw("PUT", "/tether-artifacts/job-a/x", tokenA, io.MultiReader(strings.NewReader("x")), -1, nil)
	wantError(t, resp, 411, "MissingContentLength")
	// Multipart and other subresources.
	resp = e.raw("PUT", "/tether-artifacts/job-a/x?partNumber=1&uploadId=abc", tokenA, strings.NewReader("x"), 1, nil)
	wantError(t, resp, 501, "NotImplemented")
	resp = e.raw("PUT", "/tether-artifacts/job-a/x", tokenA, strings.NewReader("x"), 1, http.Header{"X-Amz-Copy-Source": {"/tether-artifacts/job-b/y"}})
	wantError(t, resp, 501, "NotImplemented")
	resp = e.raw("PUT", "/tether-artifacts/job-a/x", tokenA, strings.NewReader("x"), 1, http.Header{"X-Amz-Content-Sha256": {"STREAMING-UNSIGNED-PAYLOAD-TRAILER"}})
	wantError(t, resp, 501, "NotImplemented")
	// A checksum this endpoint does not compute; a wrong CRC-64/NVME.
	resp = e.raw("PUT", "/tether-artifacts/job-a/x", tokenA, strings.NewReader("x"), 1, http.Header{"X-Amz-Checksum-Sha512": {"AAAAAAAAAAA="}})
	wantError(t, resp, 400, "InvalidRequest")
	resp = e.raw("PUT", "/tether-artifacts/job-a/x", tokenA, strings.NewReader("x"), 1, http.Header{"X-Amz-Checksum-Crc64nvme": {"AAAAAAAAAAA="}})
	wantError(t, resp, 400, "BadDigest")
	resp = e.raw("PUT", "/tether-artifacts/job-a/x", tokenA, strings.NewReader("x"), 1, http.Header{"X-Amz-Content-Sha256": {strings.Repeat("0", 64)}})
	wantError(t, resp, 400, "XAmzContentSHA256Mismatch")
	e.wantAbsent("job-a/x")

	// No Content-Length and no chunking.
	conn := e.rawTLS()
	u, _ := url.Parse(e.srv.URL)
	fmt.Fprintf(conn, "PUT /tether-artifacts/job-a/nolength HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n%s: %s\r\n\r\n", u.Host, names.HeaderArtifactToken, tokenA, names.HeaderArtifactPodUID, testPod)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, resp, 411, "MissingContentLength")

	// Over 5 GiB: refused from the header alone.
	conn = e.rawTLS()
	fmt.Fprintf(conn, "PUT /tether-artifacts/job-a/huge HTTP/1.1\r\nHost: %s\r\n%s: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n", u.Host, names.HeaderArtifactToken, tokenA, names.HeaderArtifactPodUID, testPod, upload.MaxObjectSize+1)
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, resp, 400, "EntityTooLarge")

	// The register route behind Route still works.
	resp = e.raw("POST", "/v1/register", "", strings.NewReader("{}"), 2, nil)
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("register: %d", resp.StatusCode)
	}
}

func testConcurrent(t *testing.T, e *env) {
	const key = "job-a/contended.bin"
	versions := [][]byte{data(40000, 1), data(40000, 2), data(40000, 3), data(40000, 4)}
	var wg sync.WaitGroup
	errs := make([]error, len(versions)*2)
	for i, v := range versions {
		wg.Go(func() {
			info, err := e.put(e.minio(tokenA, nil), key, v)
			if err == nil && info.ETag != md5hex(v) {
				err = fmt.Errorf("ETag %s, want %s", info.ETag, md5hex(v))
			}
			errs[i] = err
		})
		wg.Go(func() {
			_, errs[len(versions)+i] = e.put(e.minio(tokenA, nil), fmt.Sprintf("job-a/own-%d", i), v)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	etags := map[string]bool{}
	for _, v := range versions {
		etags[md5hex(v)] = true
	}
	final, pending := e.head(key), e.head(objects.PendingKey(key))
	if final == nil || !etags[final.ETag] {
		t.Fatalf("final object %+v", final)
	}
	if pending != nil && (!etags[pending.ETag] || pending.ETag == final.ETag) {
		t.Fatalf("pending object %+v, final %+v", pending, final)
	}
	for i, v := range versions {
		e.wantObject(fmt.Sprintf("job-a/own-%d", i), v)
	}
}

// A verdict that cannot be recorded on the binding (its status write kept
// conflicting) fails the manifest PUT with 503, so the sidecar uploads the
// manifest again instead of taking a 200 for a verdict nobody saw.
func testManifestVerdictNotRecorded(t *testing.T, e *env) {
	failures := 1
	next := e.h.OnManifest
	e.h.OnManifest = func(ctx context.Context, job Job, res verify.ManifestResult) error {
		if failures > 0 {
			failures--
			return errors.New("conflict after 15 retries")
		}
		return next(ctx, job, res)
	}
	files := map[string][]byte{"model.bin": data(100, 1)}
	e.mustPut("job-a/model.bin", files["model.bin"])
	m := manifestJSON(t, files, []string{"model.bin"})
	resp := e.raw("PUT", "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(m), int64(len(m)), nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("manifest PUT whose verdict was not recorded: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	resp = e.raw("PUT", "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(m), int64(len(m)), nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(names.HeaderManifestVerified) != "true" {
		t.Fatalf("manifest PUT again: %d %v", resp.StatusCode, resp.Header)
	}
	if len(e.manifests) != 1 || !e.manifests[0].Verified {
		t.Errorf("recorded verdicts %+v, want the second upload's", e.manifests)
	}
}
