package artifacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// directServer is the binding server's artifact endpoint (endpoint.Handler, S3
// backend on a shared S3 server) over HTTPS on loopback.
type directServer struct {
	h     *endpoint.Handler
	url   string
	caPEM []byte // trusts the endpoint and the S3 server
	s3    *s3store.S3Backend

	mu    sync.Mutex
	paths []string // requests the endpoint saw: "METHOD path"
	// handled counts the requests the endpoint finished.
	handled atomic.Int64
}

func newDirectServer(t *testing.T, env *s3env, jobID string) *directServer {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.caPEM)
	b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: env.addr, Secure: true, AccessKey: adminKey, SecretKey: adminSecre,
		Region: "us-east-1", Bucket: upload.Bucket, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}})
	if err != nil {
		t.Fatal(err)
	}
	return newDirectServerOn(t, env, jobID, b)
}

// newDirectServerOn is newDirectServer on backend b.
func newDirectServerOn(t *testing.T, env *s3env, jobID string, b *s3store.S3Backend) *directServer {
	t.Helper()
	d := &directServer{s3: b}
	d.h = &endpoint.Handler{
		Store: store.New(b, store.Options{}),
		Authorize: func(_ context.Context, token binding.Token) (endpoint.Job, error) {
			if string(token) != testToken {
				return endpoint.Job{}, endpoint.Unauthorized("no binding holds this token")
			}
			return endpoint.Job{Namespace: "ml", Name: "wb", JobID: jobID, Writable: true, Pods: map[int]string{0: testPodUID}}, nil
		},
		Log: logr.Discard(),
	}
	srv := httptest.NewTLSServer(endpoint.Route(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen := r.Method + " " + r.URL.Path
		if r.Header.Get(names.HeaderPodToken) != testPodToken {
			seen += " (without the pod token)"
		}
		d.mu.Lock()
		d.paths = append(d.paths, seen)
		d.mu.Unlock()
		d.h.ServeHTTP(w, r)
		d.handled.Add(1)
	}), http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	d.url = srv.URL
	d.caPEM = append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), env.caPEM...)
	return d
}

func (d *directServer) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.paths...)
}

// storePuts counts the PUTs sent straight to the store, and whether any
// carried the token.
type storePuts struct {
	next http.RoundTripper
	mu   sync.Mutex
	keys []string
	leak bool
}

func (s *storePuts) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.keys = append(s.keys, r.URL.Path)
	if r.Header.Get(names.HeaderArtifactToken) != "" || r.Header.Get(names.HeaderPodToken) != "" {
		s.leak = true
	}
	s.mu.Unlock()
	return s.next.RoundTrip(r)
}

// Direct uploads (the big file) and proxied ones (the small file, and the
// big one once the server turns direct mode off), on each S3 server.
func TestUploaderDirectMode(t *testing.T) { eachS3(t, testUploaderDirectMode) }

func testUploaderDirectMode(t *testing.T, env *s3env) {
	jobID := newJobID()
	d := newDirectServer(t, env, jobID)
	sp := &storePuts{}
	u, _ := newTestUploader(t, env, jobID, uploaderOpts{url: d.url, caPEM: d.caPEM, cfg: func(c *UploaderConfig) {
		c.WrapStoreTransport = func(rt http.RoundTripper) http.RoundTripper { sp.next = rt; return sp }
	}})
	dir := t.TempDir()
	big := randBytes(t, 3<<20+5)
	small := randBytes(t, 100<<10)
	writeFile(t, dir, "ckpt/big.bin", big)
	writeFile(t, dir, "small.txt", small)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	res, err := u.UploadFile(t.Context(), root, "ckpt/big.bin")
	if err != nil || res.How != Uploaded || res.MD5 != md5hex(big) {
		t.Fatalf("big: %+v %v", res, err)
	}
	info, ok := env.stat(t, jobID+"/ckpt/big.bin")
	if !ok || info.ETag != md5hex(big) || info.Size != int64(len(big)) {
		t.Fatalf("stored: %+v %v", info, ok)
	}
	want := []string{"HEAD /" + upload.Bucket + "/" + jobID + "/ckpt/big.bin", "POST " + upload.PathAuthorize, "POST " + upload.PathCommit}
	if got := d.seen(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the endpoint saw %q, want %q (the body must not go through it)", got, want)
	}
	if len(sp.keys) != 1 || !strings.Contains(sp.keys[0], "/"+upload.UploadsPrefix+jobID+"/") || sp.leak {
		t.Fatalf("store PUTs %q (token sent: %v), want one PUT of a pending upload without the token", sp.keys, sp.leak)
	}
	// Nothing left under the uploads prefix.
	if keys, err := d.s3.List(t.Context(), upload.UploadsPrefix+jobID+"/"); err != nil || len(keys) != 1 || !strings.HasSuffix(keys[0], ".committed") {
		t.Fatalf("uploads left: %q %v", keys, err)
	}

	// A small file goes through the server.
	res, err = u.UploadFile(t.Context(), root, "small.txt")
	if err != nil || res.How != Uploaded {
		t.Fatalf("small: %+v %v", res, err)
	}
	if got := d.seen(); got[len(got)-1] != "PUT /"+upload.Bucket+"/"+jobID+"/small.txt" || len(sp.keys) != 1 {
		t.Fatalf("small file: endpoint saw %q, store %q; want a proxied PUT", got, sp.keys)
	}

	// Proxy mode forced on the server: the sidecar follows.
	d.h.Store = store.New(d.s3, store.Options{Direct: store.DirectOptions{Disabled: true}})
	writeFile(t, dir, "ckpt/big2.bin", big)
	if res, err := u.UploadFile(t.Context(), root, "ckpt/big2.bin"); err != nil || res.How != Uploaded {
		t.Fatalf("big2: %+v %v", res, err)
	}
	if got := d.seen(); got[len(got)-1] != "PUT /"+upload.Bucket+"/"+jobID+"/ckpt/big2.bin" || len(sp.keys) != 1 {
		t.Fatalf("proxy forced: endpoint saw %q, store %q", got, sp.keys)
	}
}

// A file that changes while it is sent directly is never verified nor
// stored under its key.
func TestUploaderDirectModeChangingFile(t *testing.T) { eachS3(t, testUploaderDirectModeChangingFile) }

func testUploaderDirectModeChangingFile(t *testing.T, env *s3env) {
	jobID := newJobID()
	d := newDirectServer(t, env, jobID)
	dir := t.TempDir()
	path := writeFileRet(t, dir, "grow.bin", randBytes(t, 4<<20))
	var once sync.Once
	u, _ := newTestUploader(t, env, jobID, uploaderOpts{url: d.url, caPEM: d.caPEM, cfg: func(c *UploaderConfig) {
		c.MaxAttempts = 1
		c.WrapStoreTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				// The trainer appends as the body starts streaming.
				once.Do(func() {
					f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
					if err == nil {
						_, _ = f.Write([]byte("more"))
						f.Close()
					}
				})
				return rt.RoundTrip(r)
			})
		}
	}})
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = u.UploadFile(t.Context(), root, "grow.bin")
	if !errors.Is(err, errChanged) {
		t.Fatalf("UploadFile: %v, want the file changed", err)
	}
	if _, ok := env.stat(t, jobID+"/grow.bin"); ok {
		t.Fatal("a file that changed while it was sent was stored under its key")
	}
	for _, p := range d.seen() {
		if p == "POST "+upload.PathCommit {
			t.Fatal("a changed file was committed")
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func writeFileRet(t *testing.T, dir, rel string, data []byte) string {
	t.Helper()
	writeFile(t, dir, rel, data)
	return dir + "/" + rel
}
