package endpoint

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// Tokens of the test's bindings.
var (
	tokenA    = strings.Repeat("a1", 32) // job-a, writable
	tokenB    = strings.Repeat("b2", 32) // job-b, writable
	tokenDone = strings.Repeat("d4", 32) // job-done, finished
	tokenDown = strings.Repeat("e5", 32) // the authorizer cannot decide
	tokenNone = strings.Repeat("f6", 32) // no binding holds it
	allTokens = []string{tokenA, tokenB, tokenDone, tokenDown, tokenNone}
)

// testPod is node 0's registered pod in the test's bindings.
const testPod = "pod-0"

var testJobs = map[string]Job{
	tokenA:    {Namespace: "ml", Name: "job-a-wb", JobID: "job-a", Writable: true, Pods: map[int]string{0: testPod}},
	tokenB:    {Namespace: "ml", Name: "job-b-wb", JobID: "job-b", Writable: true, Pods: map[int]string{0: testPod}},
	tokenDone: {Namespace: "ml", Name: "job-done-wb", JobID: "job-done", Writable: false},
}

type verifiedCall struct {
	job  Job
	key  string
	info upload.ObjectInfo
}

// env is a Handler served over real HTTPS on loopback.
type env struct {
	t       *testing.T
	h       *Handler
	srv     *httptest.Server
	backend *faultyBackend

	// bodyReads counts the body bytes the handler read.
	bodyReads atomic.Int64
	// inflight counts requests in the handler, started all requests.
	inflight sync.WaitGroup
	started  atomic.Int64

	mu        sync.Mutex
	verified  []verifiedCall
	manifests []verify.ManifestResult
	logs      bytes.Buffer
}

func newEnv(t *testing.T, backend upload.Backend, configure ...func(*Handler, *httptest.Server)) *env {
	t.Helper()
	e := &env{t: t, backend: &faultyBackend{Backend: backend}}
	log := funcr.New(func(prefix, args string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		fmt.Fprintln(&e.logs, prefix, args)
	}, funcr.Options{Verbosity: 1})
	e.h = &Handler{
		Store: store.New(e.backend, store.Options{}),
		Authorize: func(_ context.Context, token binding.Token) (Job, error) {
			if string(token) == tokenDown {
				return Job{}, errors.New("the cache is not synced")
			}
			if j, ok := testJobs[string(token)]; ok {
				return j, nil
			}
			return Job{}, Unauthorized("no binding holds this token")
		},
		OnVerified: func(_ context.Context, job Job, key string, info upload.ObjectInfo) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.verified = append(e.verified, verifiedCall{job, key, info})
		},
		OnManifest: func(_ context.Context, _ Job, res verify.ManifestResult) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.manifests = append(e.manifests, res)
			return nil
		},
		Log: log,
	}
	// A ServeMux behind Route, as the binding server would mount it.
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/register", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.inflight.Add(1)
		defer e.inflight.Done()
		e.started.Add(1)
		orig := r.Body
		r.Body = &countingReader{r: orig, n: &e.bodyReads}
		e.h.ServeHTTP(w, r)
		// net/http decides by the body's type whether to discard or
		// close after the handler: give it back its own.
		r.Body = orig
	})
	e.srv = httptest.NewUnstartedServer(Route(counted, mux))
	for _, c := range configure {
		c(e.h, e.srv)
	}
	e.srv.StartTLS()
	t.Cleanup(func() {
		e.srv.Close()
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, tok := range allTokens {
			if strings.Contains(e.logs.String(), tok) {
				t.Errorf("the log contains token %s", tok)
			}
		}
		if t.Failed() {
			t.Logf("handler log:\n%s", e.logs.String())
		}
	})
	return e
}

// waitHandled waits until more than n requests reached the handler and
// every request in it finished.
func (e *env) waitHandled(n int64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.started.Load() <= n {
		if time.Now().After(deadline) {
			e.t.Fatal("the request never reached the handler")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.inflight.Wait()
}

// countingReader counts the bytes read from a request body.
type countingReader struct {
	r io.ReadCloser
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }

// tokenTransport adds the token, the pod (testPod, unless extra names one)
// and any extra headers to every request, like the sidecar's uploader.
type tokenTransport struct {
	token string
	extra http.Header
	next  http.RoundTripper
}

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if tt.token != "" {
		r.Header.Set(names.HeaderArtifactToken, tt.token)
		r.Header.Set(names.HeaderArtifactPodUID, testPod)
	}
	for k, vs := range tt.extra {
		r.Header[k] = vs
	}
	return tt.next.RoundTrip(r)
}

func (e *env) transport() *http.Transport {
	return e.srv.Client().Transport.(*http.Transport).Clone()
}

// minio returns a minio-go client for the endpoint: anonymous credentials,
// path-style, the token added by a RoundTripper.
func (e *env) minio(token string, extra http.Header) *minio.Client {
	e.t.Helper()
	u, _ := url.Parse(e.srv.URL)
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStatic("", "", "", credentials.SignatureAnonymous),
		Secure:       true,
		Transport:    tokenTransport{token: token, extra: extra, next: e.transport()},
		BucketLookup: minio.BucketLookupPath,
		Region:       "us-east-1",
		MaxRetries:   1,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// put uploads data to key with minio-go, as the sidecar does.
func (e *env) put(c *minio.Client, key string, data []byte, opts ...func(*minio.PutObjectOptions)) (minio.UploadInfo, error) {
	o := minio.PutObjectOptions{DisableMultipart: true}
	for _, f := range opts {
		f(&o)
	}
	return c.PutObject(context.Background(), upload.Bucket, key, bytes.NewReader(data), int64(len(data)), o)
}

// mustPut uploads and checks the returned ETag.
func (e *env) mustPut(key string, data []byte) {
	e.t.Helper()
	info, err := e.put(e.minio(tokenA, nil), key, data)
	if err != nil {
		e.t.Fatalf("PUT %s: %v", key, err)
	}
	if want := md5hex(data); info.ETag != want {
		e.t.Fatalf("PUT %s: ETag %s, want %s", key, info.ETag, want)
	}
}

// head returns the backend's view of key (nil if absent).
func (e *env) head(key string) *upload.ObjectInfo {
	e.t.Helper()
	info, err := e.backend.Head(context.Background(), key)
	if errors.Is(err, upload.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatalf("backend HEAD %s: %v", key, err)
	}
	return &info
}

func (e *env) wantObject(key string, data []byte) {
	e.t.Helper()
	info := e.head(key)
	if info == nil {
		e.t.Fatalf("%s: not stored, want %d bytes", key, len(data))
	}
	if want := (upload.ObjectInfo{Size: int64(len(data)), ETag: md5hex(data)}); !storetest.SameObject(*info, want, data) {
		e.t.Fatalf("%s: stored %+v, want %+v", key, *info, want)
	}
}

func (e *env) wantAbsent(key string) {
	e.t.Helper()
	if info := e.head(key); info != nil {
		e.t.Fatalf("%s: stored %+v, want nothing", key, *info)
	}
}

func (e *env) list(prefix string) []string {
	e.t.Helper()
	keys, err := e.backend.List(context.Background(), prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	return keys
}

// raw sends a request with net/http, the token in the header if not empty
// (and then the pod, testPod, unless hdr names one).
func (e *env) raw(method, path, token string, body io.Reader, size int64, hdr http.Header) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.ContentLength = size
	if token != "" {
		req.Header.Set(names.HeaderArtifactToken, token)
		req.Header.Set(names.HeaderArtifactPodUID, testPod)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	tr := e.transport()
	if req.Header.Get("Expect") != "" {
		tr.ExpectContinueTimeout = 10 * time.Second
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// s3Error decodes an S3 XML error response.
type s3Error struct {
	Code      string
	Message   string
	Key       string
	RequestID string `xml:"RequestId"`
}

func readError(t *testing.T, resp *http.Response) s3Error {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/xml" {
		t.Fatalf("error Content-Type %q, want application/xml (body %q)", ct, b)
	}
	var e s3Error
	if err := xml.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	if e.RequestID == "" || e.RequestID != resp.Header.Get("X-Amz-Request-Id") {
		t.Fatalf("error RequestId %q, header %q", e.RequestID, resp.Header.Get("X-Amz-Request-Id"))
	}
	if e.Message == "" {
		t.Fatalf("error %s has no message", e.Code)
	}
	return e
}

func wantError(t *testing.T, resp *http.Response, status int, code string) s3Error {
	t.Helper()
	if resp.StatusCode != status {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, want %d (body %q)", resp.StatusCode, status, b)
	}
	e := readError(t, resp)
	if e.Code != code {
		t.Fatalf("code %s (%s), want %s", e.Code, e.Message, code)
	}
	return e
}

func wantMinioError(t *testing.T, err error, status int, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %d %s", status, code)
	}
	r := minio.ToErrorResponse(err)
	if r.StatusCode != status || r.Code != code {
		t.Fatalf("error %v (status %d code %q), want %d %s", err, r.StatusCode, r.Code, status, code)
	}
}

// Short names for the shared test data, as the suites were written.
var (
	md5hex = storetest.MD5Hex
	data   = storetest.Data
)

// faultyBackend wraps a backend to count PUTs and inject faults.
type faultyBackend struct {
	upload.Backend
	puts atomic.Int64
	// lieETag makes Put report a wrong ETag.
	lieETag atomic.Bool
	// failParts, liePart, partsPut: multipart_env_test.go.
	failParts, partsPut atomic.Int64
	liePart             atomic.Bool
}

func (f *faultyBackend) Put(ctx context.Context, key string, body io.Reader, size int64) (upload.ObjectInfo, error) {
	f.puts.Add(1)
	info, err := f.Backend.Put(ctx, key, body, size)
	if err == nil && f.lieETag.Load() {
		info.ETag = strings.Repeat("0", 32)
	}
	return info, err
}

// Verification and DirectUploads are the wrapped backend's.
func (f *faultyBackend) Verification() objects.Verification { return objects.VerificationOf(f.Backend) }

func (f *faultyBackend) DirectUploads() bool {
	d, ok := f.Backend.(interface{ DirectUploads() bool })
	return !ok || d.DirectUploads()
}

func (f *faultyBackend) Stat(ctx context.Context, key string) (upload.ObjectInfo, time.Time, error) {
	if s, ok := f.Backend.(objects.Stater); ok {
		return s.Stat(ctx, key)
	}
	info, err := f.Backend.Head(ctx, key)
	return info, time.Unix(0, 0), err
}

func (f *faultyBackend) Open(ctx context.Context, key string) (io.ReadCloser, upload.ObjectInfo, error) {
	o, ok := f.Backend.(objects.Opener)
	if !ok {
		return nil, upload.ObjectInfo{}, errors.New("the backend cannot open objects")
	}
	return o.Open(ctx, key)
}

// rawTLS opens a TLS connection to the server, for requests net/http will
// not send (a body shorter than its Content-Length).
func (e *env) rawTLS() *tls.Conn {
	e.t.Helper()
	u, _ := url.Parse(e.srv.URL)
	conn, err := tls.Dial("tcp", u.Host, e.transport().TLSClientConfig)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}
