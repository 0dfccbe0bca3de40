package directupload

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/manifestschema"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// TestReadAPIFromAnOwnBucket: a control plane installed with its own
// bucket (the read redirect on, as the overlays and the chart leave it)
// and the read API, on each S3 server. A tenant reads a finished job's
// artifacts through the API server with its kubeconfig alone: a plain GET
// of the read API's path is answered 200 with the object's bytes (the
// control plane streams; a redirect there is the API server's 502), and
// pkg/client lists and downloads every file, byte for byte what the
// trainer wrote. Each failure names its cause: before the APIService is
// registered, that the read API is not installed and how to enable it;
// without the grant, the permission an RBAC Role must give; with the store
// down, that the store is unavailable.
func TestReadAPIFromAnOwnBucket(t *testing.T) {
	for _, impl := range s3server.Impls {
		t.Run(impl.String(), func(t *testing.T) { readAPIFromAnOwnBucket(t, impl) })
	}
}

func readAPIFromAnOwnBucket(t *testing.T, impl s3server.Impl) {
	ctx := context.Background()
	s := startOwnBucketWithReadAPI(t, impl)
	const ns = "team-a"
	j := s.newJob(t, ns)
	j.register(t)
	written := map[string][]byte{
		"model/final.safetensors": bytes.Repeat([]byte("weights "), 400_000), // 3.2 MB
		"metrics.json":            []byte(`{"loss":0.25}`),
	}
	for rel, b := range written {
		p := filepath.Join(j.artifactDir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	j.flush(t)
	j.succeed(t)
	wb := j.binding(t)

	reader, err := client.New(artifactReader(t, s.env, ns, "reader"), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// No APIService yet: the read API is not installed, and the client
	// says so and how to enable it.
	_, err = reader.Artifacts(ctx, wb)
	if !errors.Is(err, client.ErrNoReadAPI) || !strings.Contains(err.Error(), "APIService "+tetherv1.ReadAPIService+" is absent") ||
		!strings.Contains(err.Error(), "readAPI.enabled=true") || strings.Contains(err.Error(), "is --tether-url the binding Service") {
		t.Fatalf("reading before the read API is registered: %v\nwant ErrNoReadAPI naming the APIService and readAPI.enabled=true", err)
	}
	s.env.RegisterReadAPI(t)

	// The read API's path, as `kubectl get --raw` asks it: the object
	// itself, not a redirect to the bucket.
	readerConfig := artifactReader(t, s.env, ns, "raw-reader")
	code, body, location := rawReadAPIGet(t, readerConfig, ns+"/workerbindings/"+j.name+"/objects/model/final.safetensors")
	if code != http.StatusOK || location != "" || !bytes.Equal(body, written["model/final.safetensors"]) {
		t.Fatalf("GET through the API server: %d (Location %q), %d bytes %.200q; want 200 and the %d bytes the trainer wrote, streamed",
			code, location, len(body), body, len(written["model/final.safetensors"]))
	}

	// The manifest the sidecar's Syncer stored, as a reader in any
	// language gets it: what the published schema says.
	code, body, _ = rawReadAPIGet(t, readerConfig, ns+"/workerbindings/"+j.name+"/objects/"+upload.ManifestName)
	if code != http.StatusOK {
		t.Fatalf("GET %s through the API server: %d %.300s", upload.ManifestName, code, body)
	}
	if err := manifestschema.Validate(body); err != nil {
		t.Errorf("the stored manifest: %v\n%s", err, body)
	}

	list, err := reader.Artifacts(ctx, wb)
	if err != nil {
		t.Fatalf("listing through the read API: %v", err)
	}
	if len(list) != len(written) {
		t.Fatalf("listed %+v, want the %d files written", list, len(written))
	}
	for _, a := range list {
		var got bytes.Buffer
		if _, err := reader.Download(ctx, wb, a.Path, &got); err != nil {
			t.Errorf("downloading %s through the read API: %v", a.Path, err)
		} else if !a.Verified || !bytes.Equal(got.Bytes(), written[a.Path]) {
			t.Errorf("%s: verified %v, %d bytes; want verified and the %d bytes written", a.Path, a.Verified, got.Len(), len(written[a.Path]))
		}
	}

	// The namespace's tenant, without the read grant: refused by the API
	// server, and the client names the permission to grant.
	tenant, err := s.env.NewTenant(ctx, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := client.New(tenant.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = stranger.Download(ctx, wb, "metrics.json", io.Discard)
	for _, says := range []string{"verb get", "resource workerbindings/objects", "API group " + tetherv1.ReadAPIGroup, "namespace " + ns, "RBAC Role"} {
		if !errors.Is(err, client.ErrReadForbidden) || !strings.Contains(err.Error(), says) {
			t.Errorf("reading without the grant: %v\nwant ErrReadForbidden saying %q", err, says)
		}
	}

	// The store down: the control plane's 503, passed on by the API server.
	s.s3.Stop()
	_, err = reader.Download(ctx, wb, "metrics.json", io.Discard)
	var re *client.ReadError
	if !errors.Is(err, client.ErrStoreUnavailable) || !errors.As(err, &re) || re.Status != http.StatusServiceUnavailable {
		t.Errorf("reading with the store down: %v, want ErrStoreUnavailable (503)", err)
	}
}

// rawReadAPIGet GETs the read API's path with cfg's credentials, following
// no redirect: the status, the body and any Location.
func rawReadAPIGet(t *testing.T, cfg *rest.Config, path string) (int, []byte, string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc.Timeout = time.Minute
	resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + tetherv1.ReadAPIPathPrefix + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body, resp.Header.Get("Location")
}
