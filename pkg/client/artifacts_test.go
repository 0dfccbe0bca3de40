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

// Without ReadURL, reads go to the API server of the kubeconfig, under the
// aggregated read API, with the kubeconfig's credentials; a presigned URL
// the caller cannot reach (a store only the cluster reaches) is asked for
// again as a stream; an API server without the read API says how to get one.
func TestReadsThroughTheAPIServer(t *testing.T) {
	wb := binding()
	wb.Status.Artifacts = &tetherv1.ArtifactsStatus{Logs: []string{upload.LogKey("job-1", "trainer-0"), upload.LogKey("job-1", "gone")}}
	log := strings.TrimPrefix(upload.LogKey("job-1", "trainer-0"), "job-1/")
	prefix := tetherv1.ReadAPIPathPrefix + wb.Namespace + "/workerbindings/" + wb.Name + "/objects/"
	var mu sync.Mutex
	var asked []string
	apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path+" stream="+r.Header.Get("X-Tether-Stream")+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		switch {
		case r.URL.Path == prefix+log && r.Header.Get("X-Tether-Stream") != "true":
			// A store the caller cannot reach (the quick start's, by its
			// Service name, from a laptop): a loopback port nothing
			// listens on refuses the connection without asking any
			// resolver.
			w.Header().Set("Location", "http://127.0.0.1:1/bucket/job-1/x?X-Amz-Signature=x")
			w.WriteHeader(http.StatusTemporaryRedirect)
		case r.URL.Path == prefix+log:
			_, _ = w.Write([]byte("checkpoint"))
		case strings.HasSuffix(r.URL.Path, "/redirected.log"):
			// What kube-apiserver answers when an aggregated API redirects.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the backend attempted to redirect this request, which is not permitted","code":502}`))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`))
		}
	}))
	defer apiserver.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apiserver.Certificate().Raw})
	c, err := client.New(&rest.Config{Host: apiserver.URL, BearerToken: "tenant-token", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := c.Log(t.Context(), wb, "trainer-0")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(rc)
	_ = rc.Close()
	if string(body) != "checkpoint" {
		t.Fatalf("Log = %q; want the streamed log", body)
	}
	mu.Lock()
	want := []string{prefix + log + " stream= auth=Bearer tenant-token", prefix + log + " stream=true auth=Bearer tenant-token"}
	if strings.Join(asked, "\n") != strings.Join(want, "\n") {
		t.Errorf("the API server was asked\n%s\nwant\n%s", strings.Join(asked, "\n"), strings.Join(want, "\n"))
	}
	mu.Unlock()
	if _, err := c.Log(t.Context(), wb, "gone"); !errors.Is(err, client.ErrNoReadAPI) || !strings.Contains(err.Error(), "readAPI.enabled=true") {
		t.Errorf("an API server answering 404 itself: %v, want ErrNoReadAPI naming readAPI.enabled=true", err)
	}
	wb.Status.Artifacts.Logs = append(wb.Status.Artifacts.Logs, "job-1/.tether/logs/redirected.log")
	if _, err := c.Log(t.Context(), wb, "redirected"); err == nil || !strings.Contains(err.Error(), "no usable answer from the read API") ||
		strings.Contains(err.Error(), "is --tether-url the binding Service") {
		t.Errorf("an API server refusing the read API's redirect (502): %v, want the cause named, not --tether-url", err)
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
