package endpoint

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// Direct uploads in parts, refused the ways a sidecar (or anyone holding a
// part URL) could get them wrong: nothing unverified is completed, nothing
// is left open, and a URL writes only its own part of its own upload.
func TestMultipartDirectS3(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		b := v.NewBackend(t, "")
		caps, err := b.Probe(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := caps.Choose()
		if err != nil || !ch.Multipart || !ch.Direct {
			t.Fatalf("%s: no direct uploads in parts: %+v %v", v.Impl, ch, err)
		}
		b.Use(ch)
		e := newEnv(t, b, func(h *Handler, _ *httptest.Server) {
			// The S3 backend itself: the test wrapper does not presign.
			h.Store = store.New(b, store.Options{Multipart: store.MultipartOptions{Threshold: testPart, PartSize: testPart}})
		})
		testMultipartDirect(t, e)
	})
}

// postInto posts v and decodes a 200 answer into out.
func (e *env) postInto(path, token string, v, out any) *http.Response {
	e.t.Helper()
	resp := e.postJSON(path, token, v)
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			e.t.Fatal(err)
		}
	}
	return resp
}

// putPart PUTs b to a presigned part URL and returns the status (0: the
// store dropped the connection).
func putPart(t *testing.T, u upload.PartURL, b []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, u.URL, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		// A store may refuse a bad signature by closing the connection
		// before the body.
		t.Logf("PUT of a part: %v", err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func md5Of(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

func testMultipartDirect(t *testing.T, e *env) {
	const key = "job-a/model/merged.safetensors"
	body := bigData(int(2*testPart+1), 21)
	part := func(i int) []byte { return body[int64(i-1)*testPart : min(int64(i)*testPart, int64(len(body)))] }
	claim := func() []upload.CommitPart {
		return []upload.CommitPart{{Number: 1, MD5: md5Of(part(1))}, {Number: 2, MD5: md5Of(part(2))}, {Number: 3, MD5: md5Of(part(3))}}
	}
	authorize := func() upload.AuthorizeResponse {
		var a upload.AuthorizeResponse
		if resp := e.postInto(upload.PathAuthorize, tokenA, upload.AuthorizeRequest{Key: key, Size: int64(len(body)), Parts: true}, &a); resp.StatusCode != http.StatusOK {
			wantError(t, resp, http.StatusOK, "")
		}
		if a.Mode != upload.ModeDirectParts || len(a.Parts) != 3 || a.PartSize != testPart || a.Parts[2].Size != 1 {
			t.Fatalf("authorize answered %+v", a)
		}
		return a
	}
	commit := func(token string, a upload.AuthorizeResponse, crc string, parts []upload.CommitPart) *http.Response {
		return e.postJSON(upload.PathCommit, token, upload.CommitRequest{Key: key, Size: int64(len(body)), MD5: md5Of(body),
			CRC64NVME: crc, Upload: a.Upload, Parts: parts})
	}
	// A sidecar that does not take uploads in parts gets a single URL.
	var single upload.AuthorizeResponse
	if resp := e.postInto(upload.PathAuthorize, tokenA, upload.AuthorizeRequest{Key: key, Size: int64(len(body))}, &single); resp.StatusCode != http.StatusOK || single.Mode != upload.ModeDirect {
		t.Fatalf("an older sidecar's authorize: %d %+v", resp.StatusCode, single)
	}
	a := authorize()
	if st := putPart(t, a.Parts[0], part(1)); st != http.StatusOK {
		t.Fatalf("part 1: %d", st)
	}
	// A URL signs its part's size: another part's bytes are refused; and
	// its part number, upload and key: changed, the signature fails.
	if st := putPart(t, a.Parts[1], part(3)); st == http.StatusOK {
		t.Fatal("part 2's URL stored part 3's byte")
	}
	for _, tamper := range []func(u *url.URL){
		func(u *url.URL) { q := u.Query(); q.Set("partNumber", "2"); u.RawQuery = q.Encode() },
		func(u *url.URL) { q := u.Query(); q.Set("uploadId", q.Get("uploadId")+"x"); u.RawQuery = q.Encode() },
		func(u *url.URL) { u.Path = strings.Replace(u.Path, "merged", "other", 1) },
	} {
		u, err := url.Parse(a.Parts[0].URL)
		if err != nil {
			t.Fatal(err)
		}
		tamper(u)
		if st := putPart(t, upload.PartURL{URL: u.String()}, part(1)); st == http.StatusOK {
			t.Fatalf("a tampered part URL %s stored", u.Redacted())
		}
	}
	// A commit naming parts never uploaded.
	wantError(t, commit(tokenA, a, upload.CRC64NVMEOf(body), claim()), http.StatusBadRequest, "InvalidPart")
	e.wantAbsent(key)
	// Another job's token commits nothing and gets no URL.
	wantError(t, commit(tokenB, a, upload.CRC64NVMEOf(body), claim()), http.StatusForbidden, "AccessDenied")
	resp := e.postJSON(upload.PathParts, tokenB, upload.PartsRequest{Key: key, Size: int64(len(body)), Upload: a.Upload, From: 2})
	wantError(t, resp, http.StatusForbidden, "AccessDenied")
	// The upload resumes: authorize lists the part stored.
	a = authorize()
	if len(a.Stored) != 1 || a.Stored[0].Number != 1 || a.Stored[0].ETag != md5Of(part(1)) {
		t.Fatalf("resumed authorize lists %+v, want part 1", a.Stored)
	}
	var more upload.PartsResponse
	if resp := e.postInto(upload.PathParts, tokenA, upload.PartsRequest{Key: key, Size: int64(len(body)), Upload: a.Upload, From: 3}, &more); resp.StatusCode != http.StatusOK || len(more.Parts) != 1 || more.Parts[0].Number != 3 {
		t.Fatalf("parts from 3: %d %+v", resp.StatusCode, more)
	}
	for i := 2; i <= 3; i++ {
		if st := putPart(t, a.Parts[i-1], part(i)); st != http.StatusOK {
			t.Fatalf("part %d: %d", i, st)
		}
	}
	// A part claimed with another MD5 (the bytes sent were not those).
	bad := claim()
	bad[1].MD5 = md5Of(part(1))
	wantError(t, commit(tokenA, a, upload.CRC64NVMEOf(body), bad), http.StatusBadRequest, "InvalidPart")
	// The whole body's checksum is not the parts': the store refuses the
	// completion; the upload is dropped.
	wantError(t, commit(tokenA, a, upload.CRC64NVMEOf(part(1)), claim()), http.StatusBadRequest, "BadDigest")
	e.wantAbsent(key)
	e.wantNoOpenUploads("job-a/")
	// Anew, all parts, committed: the object is the body, nothing is left.
	a = authorize()
	if len(a.Stored) != 0 {
		t.Fatalf("a new upload lists stored parts %+v", a.Stored)
	}
	for i := 1; i <= 3; i++ {
		if st := putPart(t, a.Parts[i-1], part(i)); st != http.StatusOK {
			t.Fatalf("part %d: %d", i, st)
		}
	}
	var cr upload.CommitResponse
	if resp := e.postInto(upload.PathCommit, tokenA, upload.CommitRequest{Key: key, Size: int64(len(body)), MD5: md5Of(body),
		CRC64NVME: upload.CRC64NVMEOf(body), Upload: a.Upload, Parts: claim()}, &cr); resp.StatusCode != http.StatusOK {
		wantError(t, resp, http.StatusOK, "")
	}
	if cr.CRC64NVME != upload.CRC64NVMEOf(body) || cr.Size != int64(len(body)) || cr.Pending {
		t.Fatalf("commit answered %+v", cr)
	}
	e.wantStoredInParts(key, body)
	// Committed once: the upload id is spent, its URLs write nothing.
	wantError(t, commit(tokenA, a, upload.CRC64NVMEOf(body), claim()), http.StatusBadRequest, "NoSuchUpload")
	if st := putPart(t, a.Parts[0], part(1)); st == http.StatusOK {
		t.Fatal("a part URL of a completed upload still stores")
	}
	if keys := e.list(objects.JobUploadsPrefix("job-a")); len(keys) != 0 {
		t.Fatalf("left under the uploads prefix: %q", keys)
	}
}
