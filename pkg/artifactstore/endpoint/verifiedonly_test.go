package endpoint

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// verdicts sets the nodes job-a's binding records verified (Job.Verified),
// as the binding server's Authorizer reads them from the binding.
type verdicts struct {
	mu       sync.Mutex
	verified map[int]string
	nodes    int
	pods     map[int]string
}

func (v *verdicts) set(nodes int, pods, verified map[int]string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodes, v.pods, v.verified = nodes, pods, verified
}

func (v *verdicts) configure(h *Handler, _ *httptest.Server) {
	next := h.Authorize
	h.Authorize = func(ctx context.Context, token binding.Token) (Job, error) {
		j, err := next(ctx, token)
		if err == nil && j.JobID == "job-a" {
			v.mu.Lock()
			defer v.mu.Unlock()
			j.Verified = v.verified
			if v.pods != nil {
				j.Nodes, j.Pods = v.nodes, v.pods
			}
		}
		return j, err
	}
}

// verifiedManifest uploads files and a manifest listing them for job-a's
// node 0 and returns the manifest's SHA-256 as its verdict recorded it.
func (e *env) verifiedManifest(files map[string][]byte, order []string) string {
	e.t.Helper()
	for _, p := range order {
		e.mustPut("job-a/"+p, files[p])
	}
	m := manifestJSON(e.t, files, order)
	resp := e.raw(http.MethodPut, "/"+upload.Bucket+"/job-a/"+upload.ManifestName, tokenA, bytes.NewReader(m), int64(len(m)), nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(names.HeaderManifestVerified) != "true" {
		e.t.Fatalf("manifest PUT: %d %v", resp.StatusCode, resp.Header)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.manifests[len(e.manifests)-1].SHA256
}

// Once node 0's manifest for the current attempt is verified, a PUT of a
// key it does not list is refused before its body is read, naming the key
// and why; what it lists, and the manifest, stay writable; another node
// and a new attempt (no verdict) are not held.
func TestVerifiedNodeWritesOnlyWhatItsManifestLists(t *testing.T) {
	var v verdicts
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()}, v.configure)
	files := map[string][]byte{"model.bin": data(5000, 1), "ckpt/step-1.pt": data(300, 2)}
	order := []string{"model.bin", "ckpt/step-1.pt"}
	sha := e.verifiedManifest(files, order)
	v.set(0, nil, map[int]string{0: sha})

	before := e.bodyReads.Load()
	resp := e.raw(http.MethodPut, "/"+upload.Bucket+"/job-a/unlisted.bin", tokenA, bytes.NewReader(data(1<<20, 3)), 1<<20,
		http.Header{"Expect": {"100-continue"}})
	se := wantError(t, resp, http.StatusForbidden, "AccessDenied")
	for _, want := range []string{"job-a/unlisted.bin", "already verified", "node 0"} {
		if !strings.Contains(se.Message, want) {
			t.Errorf("refusal %q does not say %q", se.Message, want)
		}
	}
	e.waitHandled(0)
	if n := e.bodyReads.Load() - before; n != 0 {
		t.Errorf("the handler read %d body bytes of the refused PUT", n)
	}
	e.wantAbsent("job-a/unlisted.bin")
	e.wantAbsent(objects.PendingKey("job-a/unlisted.bin"))
	// Not under another name either: nodes/<r>/ is a plain path of node 0's
	// in a single-node job.
	if _, err := e.put(e.minio(tokenA, nil), "job-a/nodes/1/x.bin", []byte("x")); err == nil {
		t.Error("a verified single-node job wrote nodes/1/x.bin, which its manifest does not list")
	}

	// A listed file's new version waits as its pending object; the
	// manifest itself may be sent again.
	e.mustPut("job-a/model.bin", data(5000, 9))
	e.wantObject("job-a/model.bin", files["model.bin"])
	e.wantObject(objects.PendingKey("job-a/model.bin"), data(5000, 9))
	m := manifestJSON(t, files, order)
	if resp := e.raw(http.MethodPut, "/"+upload.Bucket+"/job-a/"+upload.ManifestName, tokenA, bytes.NewReader(m), int64(len(m)), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the verified node's manifest sent again: %d", resp.StatusCode)
	}

	// The verdict names a manifest the store does not hold (a newer one is
	// being verified): whether a key is listed cannot be told yet.
	v.set(0, nil, map[int]string{0: strings.Repeat("0", 64)})
	_, err := e.put(e.minio(tokenA, nil), "job-a/unlisted.bin", []byte("x"))
	wantMinioError(t, err, http.StatusServiceUnavailable, "ServiceUnavailable")

	// A new attempt (no verdict yet) writes again.
	v.set(0, nil, nil)
	e.mustPut("job-a/unlisted.bin", []byte("the next attempt's"))

	// In a 2-node job, node 1's verdict holds node 1 only.
	v.set(2, map[int]string{0: testPod, 1: "pod-1"}, map[int]string{1: sha})
	e.mustPut("job-a/another.bin", []byte("node 0 is not verified"))
}

// The direct path holds too: an authorize of a key the verified manifest
// does not list is refused, and so is the commit of an upload authorized
// before the verdict, whose bytes are dropped.
func TestVerifiedNodeDirectUploadsOnlyWhatItsManifestLists(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, s *storetest.S3) {
		var v verdicts
		d := newDirectEnv(t, s, 0)
		v.configure(d.h, nil)
		body := data(2<<20, 4)
		size := int64(len(body))
		const key = "job-a/late-checkpoint.bin"
		// Authorized and sent before the manifest's verdict.
		a := d.authorizeDirect(tokenA, key, size)
		if a.Mode != upload.ModeDirect {
			t.Fatalf("authorize: %+v", a)
		}
		if resp := presignedPut(t, a, body, size); resp.StatusCode != http.StatusOK {
			t.Fatalf("presigned PUT: %d", resp.StatusCode)
		}
		sha := d.verifiedManifest(map[string][]byte{"model.bin": data(100, 1)}, []string{"model.bin"})
		v.set(0, nil, map[int]string{0: sha})

		e := wantError(t, d.postJSON(upload.PathCommit, tokenA, upload.CommitRequest{Key: key, Size: size, MD5: md5hex(body), Upload: a.Upload}),
			http.StatusForbidden, "AccessDenied")
		if !strings.Contains(e.Message, key) || !strings.Contains(e.Message, "already verified") {
			t.Errorf("commit refusal %q", e.Message)
		}
		d.wantAbsent(key)
		d.wantAbsent(objects.PendingKey(key))
		d.wantNoUploads()
		wantError(t, d.postJSON(upload.PathAuthorize, tokenA, upload.AuthorizeRequest{Key: "job-a/other.bin", Size: size}),
			http.StatusForbidden, "AccessDenied")
		// A listed key is still authorized.
		if a := d.authorizeDirect(tokenA, "job-a/model.bin", size); a.Mode != upload.ModeDirect {
			t.Fatalf("authorize of a listed key: %+v", a)
		}
	})
}
