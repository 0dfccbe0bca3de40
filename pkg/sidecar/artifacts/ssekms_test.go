package artifacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// The sidecar against an SSE-KMS-like store (the tests' S3 front rewrites
// every ETag to random hex, as AWS does for SSE-KMS objects), the control
// plane's verification chosen by its start-up probe: files sent directly,
// through the server with their checksum in a trailer, and small ones with
// their Content-MD5, and the manifest, are all verified, by the store's
// CRC-64/NVME, and the manifest lists both digests.
func TestUploaderSSEKMSLikeStore(t *testing.T) { eachS3(t, testUploaderSSEKMSLikeStore) }

func testUploaderSSEKMSLikeStore(t *testing.T, env *s3env) {
	jobID := newJobID()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	f, err := s3server.NewFrontTo(&url.URL{Scheme: "https", Host: env.addr}, tr, s3server.FaultRandomETag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	f.Resign(adminKey, adminSecre)
	b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: f.Endpoint, AccessKey: adminKey, SecretKey: adminSecre, Region: "us-east-1", Bucket: upload.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	caps, err := b.Probe(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := caps.Choose()
	if err != nil || !ch.Verification.ByChecksum {
		t.Fatalf("probe %+v: choice %+v, %v; want verification by checksum", caps, ch, err)
	}
	b.Use(ch)
	d := newDirectServerOn(t, env, jobID, b)
	var verdicts []verify.ManifestResult
	d.h.OnManifest = func(_ context.Context, _ endpoint.Job, res verify.ManifestResult) error {
		verdicts = append(verdicts, res)
		return nil
	}
	next := d.h.Authorize
	d.h.Authorize = func(ctx context.Context, token binding.Token) (endpoint.Job, error) {
		j, err := next(ctx, token)
		j.Nodes, j.Pods = 1, map[int]string{0: "pod-0"}
		return j, err
	}
	u, _ := newTestUploader(t, env, jobID, uploaderOpts{url: d.url, caPEM: d.caPEM, cfg: func(c *UploaderConfig) { c.PodUID = "pod-0" }})
	dir := t.TempDir()
	files := map[string][]byte{"ckpt/big.bin": randBytes(t, 3<<20+5), "proxied.bin": randBytes(t, 512<<10), "small.txt": randBytes(t, 1000)}
	for p, b := range files {
		writeFile(t, dir, p, b)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var listed []upload.ManifestFile
	for p, b := range files {
		res, err := u.UploadFile(t.Context(), root, p)
		if err != nil || res.How != Uploaded || res.MD5 != md5hex(b) || res.CRC64NVME != upload.CRC64NVMEOf(b) || res.Attempts != 1 {
			t.Fatalf("%s: %+v %v; want uploaded once with MD5 %s and CRC-64/NVME %s", p, res, err, md5hex(b), upload.CRC64NVMEOf(b))
		}
		info, ok := env.stat(t, jobID+"/"+p)
		if !ok || info.Size != int64(len(b)) {
			t.Fatalf("%s stored: %+v %v", p, info, ok)
		}
		listed = append(listed, upload.ManifestFile{Path: p, Size: res.Size, MD5: res.MD5, CRC64NVME: res.CRC64NVME})
	}
	if want := ch.Direct; want != (len(d.seen()) > 0 && contains(d.seen(), "POST "+upload.PathCommit)) {
		t.Errorf("direct uploads %v, but the endpoint saw %q", want, d.seen())
	}
	m := NewManifest(jobID, listed)
	m.PodUID = "pod-0"
	if _, err := u.PutManifest(t.Context(), m); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if len(verdicts) != 1 || !verdicts[0].Verified {
		t.Fatalf("manifest verdicts %+v, want one, verified", verdicts)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// A binding server from before trailing checksums refuses aws-chunked
// bodies (501 NotImplemented): the Uploader sends the plain body from then
// on, and the file is still verified.
func TestUploaderServerWithoutTrailers(t *testing.T) {
	env := needS3(t)
	jobID := newJobID()
	d := newDirectServer(t, env, jobID)
	d.h.Store = store.New(d.s3, store.Options{Direct: store.DirectOptions{Disabled: true}})
	var refused, trailers atomic.Int64
	u, _ := newTestUploader(t, env, jobID, uploaderOpts{url: d.url, caPEM: d.caPEM, wrap: func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodPut || r.Header.Get("X-Amz-Trailer") == "" {
				return rt.RoundTrip(r)
			}
			trailers.Add(1)
			if r.Body != nil {
				_ = r.Body.Close()
			}
			refused.Add(1)
			body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>aws-chunked bodies and trailers are not supported</Message></Error>`
			return &http.Response{StatusCode: http.StatusNotImplemented, Status: "501 Not Implemented", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
		})
	}})
	dir := t.TempDir()
	files := map[string][]byte{"a.bin": randBytes(t, 300<<10), "b.bin": randBytes(t, 200<<10)}
	for p, b := range files {
		writeFile(t, dir, p, b)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, p := range []string{"a.bin", "b.bin"} {
		res, err := u.UploadFile(t.Context(), root, p)
		if err != nil || res.MD5 != md5hex(files[p]) || res.CRC64NVME != upload.CRC64NVMEOf(files[p]) {
			t.Fatalf("%s: %+v %v", p, res, err)
		}
	}
	if trailers.Load() != 1 || refused.Load() != 1 {
		t.Fatalf("%d PUTs with a trailer, want 1 (the first, refused; the rest plain)", trailers.Load())
	}
}
