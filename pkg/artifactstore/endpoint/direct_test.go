package endpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// directEnv is a Handler with the S3 backend on a real S3 server, its
// direct-upload endpoints served over HTTPS on loopback.
type directEnv struct {
	*env
	s3 *s3store.S3Backend
	// final makes job-a's binding finished (not writable).
	final atomic.Bool
}

func newDirectEnv(t *testing.T, v *storetest.S3, ttl time.Duration) *directEnv {
	t.Helper()
	d := &directEnv{s3: v.NewBackend(t, "pre/")}
	d.env = newEnv(t, d.s3, func(h *Handler, _ *httptest.Server) {
		// The S3 backend itself: the test wrapper does not presign.
		h.Store = store.New(d.s3, store.Options{Direct: store.DirectOptions{TTL: ttl}})
		next := h.Authorize
		h.Authorize = func(ctx context.Context, token binding.Token) (Job, error) {
			j, err := next(ctx, token)
			if d.final.Load() && j.JobID == "job-a" {
				j.Writable = false
			}
			return j, err
		}
	})
	return d
}

func (e *env) postJSON(path, token string, v any) *http.Response {
	e.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.raw(http.MethodPost, path, token, bytes.NewReader(b), int64(len(b)), http.Header{"Content-Type": {"application/json"}})
}

func decodeJSON[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	var v T
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return v
}

func (e *env) authorizeDirect(token, key string, size int64) upload.AuthorizeResponse {
	e.t.Helper()
	return decodeJSON[upload.AuthorizeResponse](e.t, e.postJSON(upload.PathAuthorize, token, upload.AuthorizeRequest{Key: key, Size: size}))
}

// presignedPut sends body to the presigned URL with Content-Length size
// (no token: the store must not see one).
func presignedPut(t *testing.T, a upload.AuthorizeResponse, body []byte, size int64) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, a.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	for k, v := range a.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("presigned PUT: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// wantStoreRefusal sends a PUT the store must refuse: a 403, or (versitygw
// answers before it read the body, then closes) a connection reset or
// broken pipe while the body was still being written. Either way the
// callers check that nothing was stored.
func wantStoreRefusal(t *testing.T, a upload.AuthorizeResponse, body []byte, size int64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, a.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	switch {
	case err != nil && (strings.Contains(err.Error(), "connection reset by peer") || strings.Contains(err.Error(), "broken pipe")):
	case err != nil:
		t.Fatalf("presigned PUT: %v, want a refusal", err)
	default:
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("presigned PUT of %d bytes: %d, want 403", size, resp.StatusCode)
		}
	}
}

func (d *directEnv) wantNoUploads() {
	d.t.Helper()
	// A commit's marker stays (until the binding ends) so its URL cannot be
	// committed twice; no upload's bytes do.
	keys := slices.DeleteFunc(d.list(upload.UploadsPrefix+"job-a/"), func(k string) bool { return strings.HasSuffix(k, ".committed") })
	if len(keys) != 0 {
		d.t.Fatalf("direct uploads left behind: %q", keys)
	}
}

func TestDirectUpload(t *testing.T) {
	storetest.EachS3(t, testDirectUpload)
}

func testDirectUpload(t *testing.T, v *storetest.S3) {
	body := data(3<<20+17, 7)
	size := int64(len(body))
	commit := func(a upload.AuthorizeResponse, key string, size int64, sum string) upload.CommitRequest {
		return upload.CommitRequest{Key: key, Size: size, MD5: sum, Upload: a.Upload}
	}

	t.Run("HappyPath", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		const key = "job-a/ckpt/model.bin"
		a := d.authorizeDirect(tokenA, key, size)
		if a.Mode != upload.ModeDirect || a.URL == "" || a.Upload == "" || time.Until(a.Expires) < 4*time.Minute {
			t.Fatalf("authorize: %+v", a)
		}
		if strings.Contains(a.URL, key) || !strings.Contains(a.URL, upload.UploadsPrefix) {
			t.Fatalf("the URL is not for a pending upload key: %s", a.URL)
		}
		resp := presignedPut(t, a, body, size)
		if resp.StatusCode != http.StatusOK || trimQuotes(resp.Header.Get("ETag")) != md5hex(body) {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("presigned PUT: %d ETag %s: %s", resp.StatusCode, resp.Header.Get("ETag"), b)
		}
		d.wantAbsent(key) // not before the commit
		c := decodeJSON[upload.CommitResponse](t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(body))))
		if c.ETag != md5hex(body) || c.Size != size || c.Pending {
			t.Fatalf("commit: %+v", c)
		}
		d.wantObject(key, body)
		d.wantNoUploads()
		if len(d.verified) != 1 || d.verified[0].key != key {
			t.Fatalf("OnVerified: %+v", d.verified)
		}
		// A second upload of other content goes to the key's pending object.
		other := data(1<<20, 9)
		a2 := d.authorizeDirect(tokenA, key, int64(len(other)))
		if resp := presignedPut(t, a2, other, int64(len(other))); resp.StatusCode != http.StatusOK {
			t.Fatalf("second PUT: %d", resp.StatusCode)
		}
		c = decodeJSON[upload.CommitResponse](t, d.postJSON(upload.PathCommit, tokenA, commit(a2, key, int64(len(other)), md5hex(other))))
		if !c.Pending {
			t.Fatalf("commit over other content: %+v, want pending", c)
		}
		d.wantObject(key, body)
		d.wantObject(objects.PendingKey(key), other)
		d.wantNoUploads()
		if logs := d.logs.String(); strings.Contains(logs, "X-Amz-Signature") || strings.Contains(logs, a.Upload+"?") {
			t.Fatalf("the log holds a presigned URL:\n%s", logs)
		}
	})

	t.Run("TamperedBodyNeverPromoted", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		const key = "job-a/tampered.bin"
		a := d.authorizeDirect(tokenA, key, size)
		bad := bytes.Clone(body)
		bad[12345] ^= 0xff
		if resp := presignedPut(t, a, bad, size); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT: %d", resp.StatusCode)
		}
		wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(body))), http.StatusBadRequest, "BadDigest")
		d.wantAbsent(key)
		d.wantAbsent(objects.PendingKey(key))
		d.wantNoUploads()
		if len(d.verified) != 0 {
			t.Fatalf("OnVerified for a rejected body: %+v", d.verified)
		}
	})

	t.Run("ShortOrLongBodyRefusedByTheStore", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		const key = "job-a/short.bin"
		a := d.authorizeDirect(tokenA, key, size)
		// Content-Length is signed: any other length fails the signature.
		for _, n := range []int64{size - 1, size + 1} {
			b := body
			if n > size {
				b = append(bytes.Clone(body), 'x')
			}
			wantStoreRefusal(t, a, b[:n], n)
		}
		wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(body))), http.StatusBadRequest, "NoSuchUpload")
		// A commit claiming another size than authorized is refused.
		wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size-1, md5hex(body[:size-1]))), http.StatusBadRequest, "InvalidUpload")
		// The same for another key than authorized.
		wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, "job-a/elsewhere.bin", size, md5hex(body))), http.StatusBadRequest, "InvalidUpload")
		d.wantAbsent(key)
		d.wantNoUploads()
	})

	t.Run("ExpiredURL", func(t *testing.T) {
		d := newDirectEnv(t, v, time.Second)
		const key = "job-a/late.bin"
		a := d.authorizeDirect(tokenA, key, size)
		time.Sleep(2100 * time.Millisecond)
		wantStoreRefusal(t, a, body, size)
		wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(body))), http.StatusBadRequest, "NoSuchUpload")
		d.wantAbsent(key)
	})

	// Within its URL's life, an upload id is committed once: its URL PUT
	// again with other bytes is not committed again, and those bytes are
	// not kept.
	t.Run("CommittedOnce", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		const key = "job-a/once.bin"
		a := d.authorizeDirect(tokenA, key, size)
		if resp := presignedPut(t, a, body, size); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT: %d", resp.StatusCode)
		}
		decodeJSON[upload.CommitResponse](t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(body))))
		other := data(int(size), 8)
		if resp := presignedPut(t, a, other, size); resp.StatusCode != http.StatusOK {
			t.Fatalf("second PUT through the same URL: %d (the store still takes it; the commit must not)", resp.StatusCode)
		}
		e := wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(other))), http.StatusConflict, "InvalidUpload")
		if !strings.Contains(e.Message, "already committed") {
			t.Errorf("message %q", e.Message)
		}
		d.wantObject(key, body)
		d.wantAbsent(objects.PendingKey(key))
		d.wantNoUploads()
	})

	// The commit repeats the authorization's manifest-key rule: a manifest
	// is never stored from a direct upload (its verdict would be skipped).
	t.Run("ManifestKeyNotCommitted", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		key := "job-a/" + upload.ManifestName
		m := []byte(`{"version":"v1","jobID":"job-a","podUID":"pod-0","files":[]}`)
		id := uploadID(key, int64(len(m)))
		if _, err := d.s3.Put(context.Background(), objects.UploadKey("job-a", id), bytes.NewReader(m), int64(len(m))); err != nil {
			t.Fatal(err)
		}
		e := wantError(t, d.postJSON(upload.PathCommit, tokenA, upload.CommitRequest{Key: key, Size: int64(len(m)), MD5: md5hex(m), Upload: id}),
			http.StatusBadRequest, "InvalidRequest")
		if !strings.Contains(e.Message, "manifest") {
			t.Errorf("message %q", e.Message)
		}
		d.wantAbsent(key)
	})

	t.Run("FinalBindingRefused", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		wantError(t, d.postJSON(upload.PathAuthorize, tokenDone, upload.AuthorizeRequest{Key: "job-done/x.bin", Size: 5}), http.StatusForbidden, "AccessDenied")
		wantError(t, d.postJSON(upload.PathAuthorize, tokenB, upload.AuthorizeRequest{Key: "job-a/x.bin", Size: 5}), http.StatusForbidden, "AccessDenied")
		wantError(t, d.postJSON(upload.PathAuthorize, tokenNone, upload.AuthorizeRequest{Key: "job-a/x.bin", Size: 5}), http.StatusUnauthorized, "AccessDenied")
		// The binding finishes between the PUT and the commit: refused,
		// and the uploaded body is dropped.
		const key = "job-a/after-the-end.bin"
		a := d.authorizeDirect(tokenA, key, size)
		if resp := presignedPut(t, a, body, size); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT: %d", resp.StatusCode)
		}
		d.final.Store(true)
		wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(body))), http.StatusForbidden, "AccessDenied")
		d.wantAbsent(key)
		d.wantNoUploads()
	})

	// A URL used after its binding ended: the store takes the PUT, but
	// the commit is refused and what it wrote dropped; nothing reaches the
	// key or its pending key.
	t.Run("URLUsedAfterTheBindingEnded", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		const key = "job-a/after-the-end-2.bin"
		a := d.authorizeDirect(tokenA, key, size)
		d.final.Store(true)
		if _, err := d.h.Store.DropPending(context.Background(), "job-a"); err != nil {
			t.Fatal(err)
		}
		if resp := presignedPut(t, a, body, size); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT: %d", resp.StatusCode)
		}
		wantError(t, d.postJSON(upload.PathCommit, tokenA, commit(a, key, size, md5hex(body))), http.StatusForbidden, "AccessDenied")
		d.wantAbsent(key)
		d.wantAbsent(objects.PendingKey(key))
		d.wantNoUploads()
	})

	t.Run("UncommittedUploadsDroppedWhenTheBindingEnds", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		a := d.authorizeDirect(tokenA, "job-a/orphan.bin", size)
		if resp := presignedPut(t, a, body, size); resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT: %d", resp.StatusCode)
		}
		if n, err := d.h.Store.Promote(context.Background(), "job-a", nil); err != nil || n != 0 {
			t.Fatalf("Promote: %d %v", n, err)
		}
		d.wantAbsent("job-a/orphan.bin")
		d.wantNoUploads()
	})

	t.Run("ProxyModeAnswers", func(t *testing.T) {
		d := newDirectEnv(t, v, 0)
		// Manifests go through the server.
		if a := d.authorizeDirect(tokenA, "job-a/"+upload.ManifestName, 100); a.Mode != upload.ModeProxy || a.URL != "" {
			t.Fatalf("manifest: %+v, want proxy", a)
		}
		d.h.Store = store.New(d.s3, store.Options{Direct: store.DirectOptions{Disabled: true}})
		if a := d.authorizeDirect(tokenA, "job-a/x.bin", 100); a.Mode != upload.ModeProxy || a.URL != "" {
			t.Fatalf("direct disabled: %+v, want proxy", a)
		}
	})
}

// The fs backend cannot presign: authorize answers proxy mode.
func TestDirectFallsBackToProxyForFS(t *testing.T) {
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()})
	if a := e.authorizeDirect(tokenA, "job-a/x.bin", 100); a.Mode != upload.ModeProxy || a.URL != "" || a.Upload != "" {
		t.Fatalf("fs: %+v, want proxy", a)
	}
	wantError(t, e.postJSON(upload.PathAuthorize, tokenA, upload.AuthorizeRequest{Key: "job-a/.tether/x", Size: 1}), http.StatusForbidden, "AccessDenied")
	wantError(t, e.raw(http.MethodGet, upload.PathAuthorize, tokenA, nil, 0, nil), http.StatusMethodNotAllowed, "MethodNotAllowed")
	wantError(t, e.raw(http.MethodPost, upload.PathAuthorize, tokenA, strings.NewReader("{"), 1, nil), http.StatusBadRequest, "MalformedJSON")
}

func trimQuotes(s string) string { return strings.Trim(s, `"`) }
