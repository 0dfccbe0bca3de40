package client_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/upload"
)

// readEndpoint is a real HTTPS server in the read endpoint's place: it
// serves objects by their path under a job's prefix and records each path
// asked for.
type readEndpoint struct {
	mu     sync.Mutex
	asked  []string
	client *client.Client
}

func newReadEndpoint(t *testing.T, wb *tetherv1.WorkerBinding, objects map[string]string) *readEndpoint {
	t.Helper()
	e := &readEndpoint{}
	prefix := tetherv1.ReadPathPrefix + wb.Namespace + "/workerbindings/" + wb.Name + "/objects/"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rel := strings.TrimPrefix(r.URL.Path, prefix)
		e.mu.Lock()
		e.asked = append(e.asked, rel)
		e.mu.Unlock()
		body, ok := objects[rel]
		if !ok || rel == r.URL.Path {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"reason":"NotFound","message":"no such object"}`))
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	// The Kubernetes client is never used here: no request reaches Host.
	c, err := client.New(&rest.Config{Host: "https://127.0.0.1:1", BearerToken: "t"}, client.Options{ReadURL: srv.URL, ReadCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	e.client = c
	return e
}

func (e *readEndpoint) paths() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.asked...)
}

func binding() *tetherv1.WorkerBinding {
	return &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm"},
		Spec: tetherv1.WorkerBindingSpec{JobID: "job-1"}}
}

const manifest = `{"version":"v1","jobID":"job-1","files":[{"path":"model.bin","size":3,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// The control plane records a manifest's SHA-256 with every verdict; a node
// whose manifest has none is refused, not listed as unverified files.
func TestArtifactsRefusesAManifestWithoutRecordedSHA256(t *testing.T) {
	wb := binding()
	wb.Status.Nodes = []tetherv1.NodeStatus{{Rank: 0, Artifacts: &tetherv1.NodeArtifacts{Manifest: "job-1/manifest.json", Verified: true, Files: 1, Bytes: 3}}}
	e := newReadEndpoint(t, wb, map[string]string{"manifest.json": manifest})

	list, err := e.client.Artifacts(t.Context(), wb)
	var de *client.ManifestDigestError
	if !errors.As(err, &de) || de.Want != "" || de.Got != sha256Hex(manifest) {
		t.Fatalf("Artifacts = %+v, %v; want a *ManifestDigestError with no recorded SHA-256", list, err)
	}
	if !strings.Contains(err.Error(), "no SHA-256 recorded on the binding") {
		t.Errorf("error %q does not say the binding records no SHA-256", err)
	}

	// With the digest recorded, the same manifest lists its verified file.
	wb.Status.Nodes[0].Artifacts.ManifestSHA256 = sha256Hex(manifest)
	list, err = e.client.Artifacts(t.Context(), wb)
	if err != nil || len(list) != 1 || list[0].Path != "model.bin" || !list[0].Verified {
		t.Fatalf("Artifacts = %+v, %v; want model.bin verified", list, err)
	}
}

// A job's manifests are its nodes' (status.nodes[].artifacts); the
// aggregate status.artifacts names no manifest to read.
func TestArtifactsReadsOnlyPerNodeStatus(t *testing.T) {
	wb := binding()
	wb.Status.Artifacts = &tetherv1.ArtifactsStatus{Manifest: "job-1/manifest.json", ManifestVerified: true, Files: 1, Bytes: 3}
	e := newReadEndpoint(t, wb, map[string]string{"manifest.json": manifest})

	list, err := e.client.Artifacts(t.Context(), wb)
	if err != nil || len(list) != 0 {
		t.Fatalf("Artifacts of a binding without status.nodes = %+v, %v; want none", list, err)
	}
	if asked := e.paths(); len(asked) != 0 {
		t.Errorf("read %v for a binding without status.nodes", asked)
	}
}

// Trainer logs are archived under upload.LogsDir only (upload.LogKey); a
// key elsewhere under the job's prefix is not read as a pod's log.
func TestLogReadsOnlyTheArchivedLogKey(t *testing.T) {
	wb := binding()
	wb.Status.Artifacts = &tetherv1.ArtifactsStatus{Logs: []string{upload.LogKey("job-1", "pod-a"), "job-1/logs/pod-b.log"}}
	e := newReadEndpoint(t, wb, map[string]string{
		strings.TrimPrefix(upload.LogKey("job-1", "pod-a"), "job-1/"): "step 1\n",
		"logs/pod-b.log": "a file the trainer wrote\n",
	})

	r, err := e.client.Log(t.Context(), wb, "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	if r, err := e.client.Log(t.Context(), wb, "pod-b"); err == nil {
		_ = r.Close()
		t.Fatalf("Log(pod-b) read %v, a key outside %s", e.paths(), upload.LogsDir)
	} else if !strings.Contains(err.Error(), "no archived log of pod pod-b") {
		t.Errorf("Log(pod-b) = %v, want no archived log", err)
	}
	if got := client.LogPods(wb); len(got) != 2 || got[0] != "pod-a" || got[1] == "pod-b" {
		t.Errorf("LogPods = %q, want pod-a first and the key outside %s not named pod-b", got, upload.LogsDir)
	}
}

// A node's artifacts are what its own manifest lists: a binding naming
// another key as a node's manifest is refused before anything is read, and
// Find and Download take only listed paths.
func TestArtifactsAreOnlyWhatTheNodesManifestLists(t *testing.T) {
	wb := binding()
	wb.Status.Phase = tetherv1.PhaseSucceeded
	wb.Status.Nodes = []tetherv1.NodeStatus{{Rank: 0, Artifacts: &tetherv1.NodeArtifacts{Manifest: "job-1/nodes/1/manifest.json",
		ManifestSHA256: sha256Hex(manifest), Verified: true, Files: 1, Bytes: 3}}}
	e := newReadEndpoint(t, wb, map[string]string{"manifest.json": manifest, "nodes/1/manifest.json": manifest, "model.bin": "abc", "unlisted.bin": "x"})
	if _, err := e.client.Artifacts(t.Context(), wb); err == nil || !strings.Contains(err.Error(), "not the node's manifest key job-1/manifest.json") {
		t.Fatalf("Artifacts with node 0's manifest at node 1's key: %v, want refused", err)
	}
	if asked := e.paths(); len(asked) != 0 {
		t.Errorf("read %v", asked)
	}
	wb.Status.Nodes[0].Artifacts.Manifest = "job-1/manifest.json"
	var out strings.Builder
	if _, err := e.client.Download(t.Context(), wb, "model.bin", &out); err != nil || out.String() != "abc" {
		t.Fatalf("Download(model.bin) = %q, %v", out.String(), err)
	}
	if _, err := e.client.Download(t.Context(), wb, "unlisted.bin", io.Discard); err == nil || !strings.Contains(err.Error(), "no artifact unlisted.bin in the manifests") {
		t.Errorf("Download(unlisted.bin) = %v, want refused as not listed", err)
	}
	for _, p := range e.paths() {
		if p == "unlisted.bin" {
			t.Error("the client read unlisted.bin")
		}
	}
}
