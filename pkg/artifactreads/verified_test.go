package artifactreads

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// allowAll authenticates every token as alice and allows her everything.
type allowAll struct{}

func (allowAll) Authenticate(context.Context, string) (authnv1.UserInfo, error) {
	return authnv1.UserInfo{Username: "alice"}, nil
}

func (allowAll) Authorize(context.Context, authnv1.UserInfo, authzv1.ResourceAttributes) (bool, string, error) {
	return true, "", nil
}

// TestSucceededServesOnlyVerifiedArtifacts: a Succeeded binding's reads
// serve its verified manifests, what they list and its archived logs; an
// object nobody's manifest lists is 404 not_verified, and a verified
// manifest changed in the store serves none of its node's files. A
// binding that has not succeeded is read as stored.
func TestSucceededServesOnlyVerifiedArtifacts(t *testing.T) {
	ctx := context.Background()
	backend, err := fsstore.NewFSBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string, b []byte) {
		t.Helper()
		if _, err := backend.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	model, shard := []byte("the verified model"), []byte("node 1's shard")
	manifest := func(files ...upload.ManifestFile) []byte {
		b, _ := json.Marshal(upload.Manifest{Version: upload.ManifestVersion, JobID: "job-a", PodUID: "p", Files: files})
		return b
	}
	m0 := manifest(upload.ManifestFile{Path: "model.bin", Size: int64(len(model)), MD5: md5hex(model)})
	m1 := manifest(upload.ManifestFile{Path: "shard.bin", Size: int64(len(shard)), MD5: md5hex(shard)})
	put("job-a/model.bin", model)
	put("job-a/unlisted.bin", []byte("written after the verdict"))
	put("job-a/nodes/1/shard.bin", shard)
	put("job-a/nodes/1/extra.bin", []byte("not listed by node 1"))
	put("job-a/manifest.json", m0)
	put("job-a/nodes/1/manifest.json", m1)
	put("job-a/.tether/logs/p.log", []byte("a trainer's log"))
	put("job-a/logs/old.log", []byte("a log archived by an older control plane"))

	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm"}, Spec: tetherv1.WorkerBindingSpec{JobID: "job-a"},
		Status: tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseSucceeded, NodeCount: 2,
			Nodes: []tetherv1.NodeStatus{
				{Rank: 0, PodUID: "p", Artifacts: &tetherv1.NodeArtifacts{Manifest: "job-a/manifest.json", ManifestSHA256: verify.ManifestDigest(m0), Verified: true}},
				{Rank: 1, PodUID: "q", Artifacts: &tetherv1.NodeArtifacts{Manifest: "job-a/nodes/1/manifest.json", ManifestSHA256: verify.ManifestDigest(m1), Verified: true}},
			},
			Artifacts: &tetherv1.ArtifactsStatus{Logs: []string{"job-a/.tether/logs/p.log", "job-a/logs/old.log"}}}}
	scheme := runtime.NewScheme()
	_ = tetherv1.AddToScheme(scheme)
	bindings := fake.NewClientBuilder().WithScheme(scheme).WithObjects(wb).Build()
	srv := httptest.NewServer(New(Options{Backend: backend, Reviewer: allowAll{}, Bindings: bindings, Log: logr.Discard()}))
	defer srv.Close()
	get := func(rel string) (int, ReadError) {
		t.Helper()
		return readAs(t, srv, rel)
	}
	for _, rel := range []string{"model.bin", "manifest.json", "nodes/1/shard.bin", "nodes/1/manifest.json", ".tether/logs/p.log", "logs/old.log"} {
		if code, re := get(rel); code != http.StatusOK {
			t.Errorf("%s: %d %+v, want 200", rel, code, re)
		}
	}
	for _, rel := range []string{"unlisted.bin", "nodes/1/extra.bin", "nodes/1/model.bin", "nodes/2/x.bin"} {
		code, re := get(rel)
		if code != http.StatusNotFound || re.Reason != "not_verified" || !strings.Contains(re.Message, "not part of the job's verified artifacts") {
			t.Errorf("%s: %d %+v, want 404 not_verified", rel, code, re)
		}
	}

	// Node 1's manifest rewritten in the store after its verdict, read by
	// a replica that has not read it before: none of node 1's files is
	// served; node 0's still are. (What a verified manifest lists is kept
	// by its digest: a replica that read it before answers from that.)
	put("job-a/nodes/1/manifest.json", manifest(upload.ManifestFile{Path: "extra.bin", Size: 20, MD5: md5hex(nil)}))
	fresh := httptest.NewServer(New(Options{Backend: backend, Reviewer: allowAll{}, Bindings: bindings, Log: logr.Discard()}))
	defer fresh.Close()
	for _, rel := range []string{"nodes/1/extra.bin", "nodes/1/shard.bin"} {
		if code, re := readAs(t, fresh, rel); code != http.StatusConflict || re.Reason != "manifest_changed" {
			t.Errorf("%s of a changed manifest: %d %+v, want 409 manifest_changed", rel, code, re)
		}
	}
	if code, _ := readAs(t, fresh, "model.bin"); code != http.StatusOK {
		t.Errorf("node 0's file after node 1's manifest changed: %d", code)
	}

	// Not succeeded: read as stored.
	wb.Status.Phase = tetherv1.PhaseFailed
	if err := bindings.Update(ctx, wb); err != nil {
		t.Fatal(err)
	}
	if code, re := get("unlisted.bin"); code != http.StatusOK {
		t.Errorf("unlisted.bin of a failed binding: %d %+v, want 200", code, re)
	}
}

// readAs GETs rel of team-a/llm from srv with a bearer token.
func readAs(t *testing.T, srv *httptest.Server, rel string) (int, ReadError) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+tetherv1.ReadPathPrefix+"team-a/workerbindings/llm/objects/"+rel, nil)
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var re ReadError
	_ = json.Unmarshal(b, &re)
	return resp.StatusCode, re
}
