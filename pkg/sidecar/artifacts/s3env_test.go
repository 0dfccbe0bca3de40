package artifacts

// Test environment: a real S3 server (versitygw, posix backend, as a
// subprocess on 127.0.0.1 with TLS; SeaweedFS too for the direct-mode
// tests) and a fault-injecting proxy in front of it. The S3 server does
// not check X-Tether-Token (the binding server does);
// these tests are about the uploader's semantics: single PUTs, ETag
// verification, retries, resumption. The bucket has a policy that lets
// anonymous requests PUT and HEAD, as the binding server's endpoint does for
// a valid token.

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/certs"
	"github.com/tether-dev/tether/test/framework/s3server"
)

const (
	testToken  = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	adminKey   = "tetheradmin"
	adminSecre = "tether-test-secret"
	// testPodToken stands for the kubelet's projected pod token (a JWT).
	testPodToken = "eyJhbGciOiJSUzI1NiJ9.eyJuIjoxfQ.c2ln"
	// testPodUID is node 0's pod in the test servers' bindings, which the
	// test uploaders name (the endpoint takes a write only from it).
	testPodUID = "pod-0"
)

// s3env is a shared S3 server.
type s3env struct {
	addr  string // 127.0.0.1:port (TLS)
	caPEM []byte // trusts addr
	admin *minio.Client
	srv   *s3server.Server
	tmp   string
}

// shared is one implementation's server, started on first use.
type shared struct {
	once sync.Once
	env  *s3env
	err  error
	skip string
}

var servers = map[s3server.Impl]*shared{}

func init() {
	for _, impl := range s3server.Impls {
		servers[impl] = &shared{}
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range servers {
		if s.env != nil {
			s.env.srv.Stop()
			os.RemoveAll(s.env.tmp)
		}
	}
	os.Exit(code)
}

// needS3 returns the shared versitygw, starting it on first use.
func needS3(t *testing.T) *s3env { return needS3Impl(t, s3server.VersityGW) }

// needS3Impl returns the shared server of impl, starting it on first use.
// Without the binary the test is skipped, or fails under CI=true.
func needS3Impl(t *testing.T, impl s3server.Impl) *s3env {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %v; skipped in -short mode", impl)
	}
	s := servers[impl]
	s.once.Do(func() { s.env, s.skip, s.err = startS3(impl) })
	if s.skip != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v is required under CI=true: %s", impl, s.skip)
		}
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("starting %v: %v", impl, s.err)
	}
	return s.env
}

// eachS3 runs f in a subtest per S3 implementation, on its shared server.
func eachS3(t *testing.T, f func(t *testing.T, env *s3env)) {
	for _, impl := range s3server.Impls {
		t.Run(impl.String(), func(t *testing.T) { f(t, needS3Impl(t, impl)) })
	}
}

func startS3(impl s3server.Impl) (*s3env, string, error) {
	tmp, err := os.MkdirTemp("", "tether-"+impl.String()+"-")
	if err != nil {
		return nil, "", err
	}
	data := filepath.Join(tmp, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, "", err
	}
	caPEM, certPEM, keyPEM, err := testPKI("127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	certFile, keyFile := filepath.Join(tmp, "tls.crt"), filepath.Join(tmp, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := s3server.Start(ctx, s3server.Options{Impl: impl, Dir: data, AccessKey: adminKey, SecretKey: adminSecre,
		CertFile: certFile, KeyFile: keyFile, CAPEM: caPEM})
	if errors.Is(err, s3server.ErrNoBinary) {
		return nil, err.Error(), nil
	}
	if err != nil {
		return nil, "", err
	}
	// Anonymous PUT and HEAD, as the binding endpoint allows a valid token.
	if err := srv.MakeBucket(ctx, upload.Bucket, true); err != nil {
		srv.Stop()
		return nil, "", err
	}
	return &s3env{addr: srv.Endpoint, caPEM: caPEM, admin: srv.Admin, srv: srv, tmp: tmp}, "", nil
}

// testPKI makes a CA and a leaf certificate for host.
func testPKI(host string) (caPEM, certPEM, keyPEM []byte, err error) {
	ca, err := certs.New()
	if err != nil {
		return nil, nil, nil, err
	}
	leaf, err := ca.NewKeyPair(certs.CommonName(host), certs.Hosts(host), certs.ExtKeyUsage(x509.ExtKeyUsageServerAuth))
	if err != nil {
		return nil, nil, nil, err
	}
	return ca.CertPEM, leaf.CertPEM, leaf.KeyPEM, nil
}

// stat HEADs key with the admin credentials (not through the uploader).
func (e *s3env) stat(t *testing.T, key string) (minio.ObjectInfo, bool) {
	t.Helper()
	info, err := e.admin.StatObject(context.Background(), upload.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return info, false
		}
		t.Fatalf("stat %s: %v", key, err)
	}
	return info, true
}

func (e *s3env) get(t *testing.T, key string) []byte {
	t.Helper()
	o, err := e.admin.GetObject(context.Background(), upload.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

// ---- per-test wiring ----

var jobSeq atomic.Int64

// newJobID is unique per test run, so tests share the bucket.
func newJobID() string {
	return fmt.Sprintf("job-%d-%d", time.Now().UnixNano()%1e9, jobSeq.Add(1))
}

// writeFile writes a file (parents created) and returns its MD5.
func writeFile(t *testing.T, dir, rel string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return md5hex(data)
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func randBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// counter counts requests by method, and checks the token on each.
type counter struct {
	next  http.RoundTripper
	mu    sync.Mutex
	puts  []string // keys
	heads int
	bad   int // requests without the right token
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if r.Header.Get(names.HeaderArtifactToken) != testToken {
		c.bad++
	}
	switch r.Method {
	case http.MethodPut:
		c.puts = append(c.puts, strings.TrimPrefix(r.URL.Path, "/"+upload.Bucket+"/"))
	case http.MethodHead:
		c.heads++
	}
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *counter) putKeys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.puts...)
}

type uploaderOpts struct {
	url   string // default: versitygw directly
	caPEM []byte
	wrap  func(http.RoundTripper) http.RoundTripper
	cfg   func(*UploaderConfig)
}

// newTestUploader returns an Uploader for jobID talking to versitygw (or
// o.url) and the counter that sees its requests.
func newTestUploader(t *testing.T, env *s3env, jobID string, o uploaderOpts) (*Uploader, *counter) {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	podTokenFile := filepath.Join(dir, "pod-token")
	if err := os.WriteFile(podTokenFile, []byte(testPodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o.url == "" {
		o.url = "https://" + env.addr
		o.caPEM = env.caPEM
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, o.caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &counter{}
	cfg := UploaderConfig{
		ServerURL: o.url, JobID: jobID, TokenFile: tokenFile, PodTokenFile: podTokenFile, CAFile: caFile, PodUID: testPodUID,
		BackoffInitial: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			if o.wrap != nil {
				rt = o.wrap(rt)
			}
			c.next = rt
			return c
		},
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	u, err := NewUploader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return u, c
}

func newTestScanner(t *testing.T, dir string, mod func(*ScannerConfig)) *Scanner {
	t.Helper()
	cfg := ScannerConfig{Dir: dir}
	if mod != nil {
		mod(&cfg)
	}
	s, err := NewScanner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newTestSyncer(t *testing.T, sc *Scanner, u *Uploader, jobID string) *Syncer {
	t.Helper()
	// A pod UID, as cmd/sidecar always sets: the manifest requires one.
	s, err := NewSyncer(SyncerConfig{Scanner: sc, Uploader: u, JobID: jobID, PodUID: "pod-uid-" + jobID, Interval: 20 * time.Millisecond,
		Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ---- the fault-injecting proxy ----

// fault is what the proxy does to one PUT.
type fault int

const (
	pass       fault = iota
	resetBody        // read part of the body, then reset the connection
	slowDown         // answer 503 SlowDown without reading the body
	truncate         // forward only part of the body upstream, then drop both connections
	flipByte         // forward the body with one byte flipped (the store computes its ETag over that)
	forbidden        // answer 403 AccessDenied
	throttle         // forward slowly
	dropAnswer       // forward the PUT, then reset the connection instead of answering
	stall            // read a little of the body, then nothing until the client gives up
)

func (f fault) String() string {
	return [...]string{"pass", "resetBody", "slowDown", "truncate", "flipByte", "forbidden", "throttle", "dropAnswer", "stall"}[f]
}

// faultProxy is a TLS-terminating HTTP proxy on loopback between the
// uploader and versitygw. decide picks the fault for each PUT (n counts the
// PUTs of that key, from 1); HEADs always pass.
type faultProxy struct {
	srv      *httptest.Server
	upstream string
	tr       *http.Transport
	decide   func(key string, n int) fault
	rate     int // bytes per second for throttle

	closing chan struct{} // closed when the test ends

	mu     sync.Mutex
	perKey map[string]int
	faults []string
}

func newFaultProxy(t *testing.T, env *s3env, decide func(key string, n int) fault) *faultProxy {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.caPEM)
	p := &faultProxy{upstream: env.addr, decide: decide, perKey: map[string]int{}, rate: 8 << 20, closing: make(chan struct{}),
		tr: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 8}}
	p.srv = httptest.NewUnstartedServer(p)
	p.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	p.srv.StartTLS()
	t.Cleanup(func() {
		close(p.closing)
		p.srv.CloseClientConnections()
		p.srv.Close()
		p.tr.CloseIdleConnections()
	})
	return p
}

func (p *faultProxy) url() string { return p.srv.URL }

func (p *faultProxy) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
}

func (p *faultProxy) injected() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.faults...)
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := pass
	if r.Method == http.MethodPut && p.decide != nil {
		key := strings.TrimPrefix(r.URL.Path, "/"+upload.Bucket+"/")
		p.mu.Lock()
		p.perKey[key]++
		n := p.perKey[key]
		p.mu.Unlock()
		f = p.decide(key, n)
		if f != pass && f != throttle {
			p.mu.Lock()
			p.faults = append(p.faults, fmt.Sprintf("%s#%d:%s", key, n, f))
			p.mu.Unlock()
		}
	}
	half := r.ContentLength / 2
	switch f {
	case slowDown:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>fault</RequestId></Error>`)
		return
	case forbidden:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>binding finished</Message><RequestId>fault</RequestId></Error>`)
		return
	case stall:
		_, _ = io.CopyN(io.Discard, r.Body, 64<<10)
		// The server notices a client's close only once the body is
		// read, so wait for the test's end (or a bound) instead.
		select {
		case <-r.Context().Done():
		case <-p.closing:
		case <-time.After(10 * time.Second):
		}
		return
	case resetBody:
		_, _ = io.CopyN(io.Discard, r.Body, half)
		reset(w)
		return
	case truncate:
		body := io.MultiReader(io.LimitReader(r.Body, half), errReader{errors.New("truncated by the proxy")})
		_, _ = p.forward(r, body)
		reset(w)
		return
	}
	var body io.Reader = r.Body
	switch f {
	case flipByte:
		body = &flipReader{r: r.Body, at: half}
	case throttle:
		body = &slowReader{r: r.Body, rate: p.rate}
	}
	resp, err := p.forward(r, body)
	if err != nil || f == dropAnswer {
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		reset(w)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *faultProxy) forward(r *http.Request, body io.Reader) (*http.Response, error) {
	if r.ContentLength == 0 {
		body = nil
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "https://"+p.upstream+r.URL.RequestURI(), body)
	if err != nil {
		return nil, err
	}
	out.ContentLength = r.ContentLength
	for k, v := range r.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Expect", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Keep-Alive":
			continue
		}
		out.Header[k] = v
	}
	return p.tr.RoundTrip(out)
}

// reset ends the client's connection abruptly (RST), without an answer.
func reset(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*tls.Conn); ok {
		if nc, ok := tc.NetConn().(*net.TCPConn); ok {
			_ = nc.SetLinger(0)
		}
	}
	conn.Close()
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type flipReader struct {
	r   io.Reader
	at  int64
	off int64
}

func (f *flipReader) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if f.at >= f.off && f.at < f.off+int64(n) {
		b[f.at-f.off] ^= 0x01
	}
	f.off += int64(n)
	return n, err
}

type slowReader struct {
	r    io.Reader
	rate int
}

func (s *slowReader) Read(b []byte) (int, error) {
	if len(b) > 16<<10 {
		b = b[:16<<10]
	}
	n, err := s.r.Read(b)
	time.Sleep(time.Duration(n) * time.Second / time.Duration(s.rate))
	return n, err
}
