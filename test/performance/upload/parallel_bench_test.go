package upload_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/benchutil"
	"github.com/tether-dev/tether/test/framework/s3server"
)

const (
	defaultSidecars = 8
	s3Access        = "tether-bench-access"
	s3Secret        = "tether-bench-secret-0123456789"
	s3Bucket        = "tether-bench"
)

// configureDirect sets a server child's direct-upload options (the direct
// phase's file sets it); nil: the store has none (proxy only).
var configureDirect func(o *store.Options, enabled bool)

// parallelEnv is versitygw (TLS, its own process) and what every phase shares.
type parallelEnv struct {
	s3       *s3server.Server
	certFile string
	keyFile  string
	caFile   string
	roots    *x509.CertPool
	dir      string
	sidecars int
	fx       *fixture
}

// s3Client is a plain minio-go client of the store (SigV4, TLS).
func (e *parallelEnv) s3Client() (*minio.Client, error) {
	return minio.New(e.s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""), Secure: true,
		Region: "us-east-1", Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.roots}, DisableCompression: true}})
}

// phaseResult is one phase: every sidecar's file stored, at once.
type phaseResult struct {
	name                         string
	elapsed                      time.Duration
	cpCPU, storeCPU, clientCPU   time.Duration
	bytes                        int64
	pressureBefore, pressureAfer string
}

func (p phaseResult) mibPerSec() float64 { return float64(p.bytes) / mib / p.elapsed.Seconds() }
func (p phaseResult) perGiB(d time.Duration) float64 {
	return d.Seconds() / (float64(p.bytes) / gib)
}

// BenchmarkParallel8x1GiB: see the package documentation.
func BenchmarkParallel8x1GiB(b *testing.B) {
	cfg := loadConfig(b)
	n := benchutil.Size(b, defaultSidecars, 2)
	if v := os.Getenv("TETHER_BENCH_UPLOAD_SIDECARS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 || n > 64 {
			b.Fatalf("TETHER_BENCH_UPLOAD_SIDECARS=%q: want 1 to 64", v)
		}
	}
	e := startParallelEnv(b, n, getFixture(b, cfg.size))

	// TETHER_BENCH_UPLOAD_PHASES (e.g. "plain-put,direct") runs only those.
	run := func(phase string) bool {
		v := os.Getenv("TETHER_BENCH_UPLOAD_PHASES")
		return v == "" || slices.Contains(strings.Split(v, ","), phase)
	}
	var results []phaseResult
	for b.Loop() {
		if run("plain-put") {
			results = append(results, e.phase(b, "plain-put", e.plainPut))
		}
		if run("proxy") {
			results = append(results, e.phase(b, "proxy", func(ctx context.Context, i int) (string, error) { return e.sidecarPut(ctx, i, false) }))
		}
		if configureDirect != nil && run("direct") {
			results = append(results, e.phase(b, "direct", func(ctx context.Context, i int) (string, error) { return e.sidecarPut(ctx, i, true) }))
		}
	}
	b.StopTimer()
	byName := map[string]phaseResult{}
	for _, r := range results {
		byName[r.name] = r
		b.Logf("%-9s %d x %d bytes at once: %.2fs, %.1f MiB/s; CPU per GiB: control plane %.3fs, store (versitygw) %.2fs, sidecars %.2fs; CPU pressure %s -> %s",
			r.name, n, cfg.size, r.elapsed.Seconds(), r.mibPerSec(), r.perGiB(r.cpCPU), r.perGiB(r.storeCPU), r.perGiB(r.clientCPU), r.pressureBefore, r.pressureAfer)
	}
	plain, hasPlain := byName["plain-put"]
	if hasPlain {
		b.ReportMetric(plain.mibPerSec(), "plain-put-mib-per-s")
	}
	if proxy, ok := byName["proxy"]; ok {
		b.ReportMetric(proxy.mibPerSec(), "proxy-mib-per-s")
		b.ReportMetric(proxy.perGiB(proxy.cpCPU), "proxy-cp-cpu-s-per-gib")
		if hasPlain {
			b.ReportMetric(proxy.mibPerSec()/plain.mibPerSec(), "x-proxy-plain")
		}
	}
	if d, ok := byName["direct"]; ok {
		b.ReportMetric(d.mibPerSec(), "direct-mib-per-s")
		if hasPlain {
			b.ReportMetric(d.mibPerSec()/plain.mibPerSec(), "x-direct-plain")
		}
		b.ReportMetric(d.perGiB(d.cpCPU), "direct-cp-cpu-s-per-gib")
		b.ReportMetric(d.perGiB(d.storeCPU), "direct-store-cpu-s-per-gib")
	}
}

// startParallelEnv starts versitygw (TLS, its own process, stopped when b
// ends) with an empty bucket, for sidecars uploading fx.
func startParallelEnv(b *testing.B, sidecars int, fx *fixture) *parallelEnv {
	b.Helper()
	e := &parallelEnv{dir: b.TempDir(), sidecars: sidecars, fx: fx}
	certPEM, keyPEM := benchutil.SelfSignedCert(b) // 127.0.0.1: the store and the control plane
	e.certFile, e.keyFile, e.caFile = filepath.Join(e.dir, "tls.crt"), filepath.Join(e.dir, "tls.key"), filepath.Join(e.dir, "ca.crt")
	for f, data := range map[string][]byte{e.certFile: certPEM, e.keyFile: keyPEM, e.caFile: certPEM} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	e.roots = x509.NewCertPool()
	e.roots.AppendCertsFromPEM(certPEM)
	data := filepath.Join(e.dir, "s3")
	if err := os.Mkdir(data, 0o700); err != nil {
		b.Fatal(err)
	}
	s, err := s3server.Start(b.Context(), s3server.Options{Dir: data, AccessKey: s3Access, SecretKey: s3Secret,
		CertFile: e.certFile, KeyFile: e.keyFile, CAPEM: certPEM})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	e.s3 = s
	if err := s.MakeBucket(b.Context(), s3Bucket, false); err != nil {
		b.Fatal(err)
	}
	return e
}

// phase runs put for every sidecar at once, measuring the control plane
// (put returns its child's pid, "" for none), the store and this process,
// then checks every object and deletes it.
func (e *parallelEnv) phase(b *testing.B, name string, put func(ctx context.Context, i int) (string, error)) phaseResult {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), uploadTimeout(e.fx.size)*2)
	defer cancel()
	var cp *serverChild
	if name != "plain-put" {
		// As a binding server starts: the store probed, bodies from the
		// threshold stored in parts (direct ones straight from the
		// sidecars, no copy); at smoke size with 5 MiB parts, so they are.
		env := []string{childEnv + "_MULTIPART=true"}
		if benchutil.Smoke(b) {
			env = append(env, childEnv+"_MP_THRESHOLD="+strconv.Itoa(5*mib), childEnv+"_MP_PART="+strconv.Itoa(5*mib))
		}
		cp = startServerChild(b, e, name == "direct", env...)
		defer cp.stop()
	}
	runtime.GC()
	res := phaseResult{name: name, bytes: int64(e.sidecars) * e.fx.size, pressureBefore: benchutil.CPUPressure()}
	store0, cl0 := procCPU(e.s3.PID()), benchutil.ProcessCPU()
	var cp0 time.Duration
	if cp != nil {
		cp0 = procCPU(cp.cmd.Process.Pid)
	}
	start := time.Now()
	errs := make([]error, e.sidecars)
	var wg sync.WaitGroup
	for i := range e.sidecars {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var url string
			if cp != nil {
				url = cp.url
			}
			_, errs[i] = put(context.WithValue(ctx, serverURLKey{}, url), i)
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.storeCPU, res.clientCPU = procCPU(e.s3.PID())-store0, benchutil.ProcessCPU()-cl0
	if cp != nil {
		res.cpCPU = procCPU(cp.cmd.Process.Pid) - cp0
	}
	res.pressureAfer = benchutil.CPUPressure()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("%s, sidecar %d: %v", name, i, err)
		}
	}
	progress("%s: %d x %d bytes in %.2fs (%.1f MiB/s), control plane CPU %.3fs, store CPU %.2fs", name, e.sidecars, e.fx.size,
		res.elapsed.Seconds(), res.mibPerSec(), res.cpCPU.Seconds(), res.storeCPU.Seconds())
	e.checkAndDelete(b, name)
	return res
}

type serverURLKey struct{}

// checkAndDelete checks that the bucket holds exactly every sidecar's
// object (nothing pending, no upload left but direct commits' markers),
// then empties it.
func (e *parallelEnv) checkAndDelete(b *testing.B, name string) {
	b.Helper()
	c, err := e.s3Client()
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	want := map[string]bool{}
	for i := range e.sidecars {
		want[e.key(name, i)] = true
	}
	for oi := range c.ListObjects(ctx, s3Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if oi.Err != nil {
			b.Fatal(oi.Err)
		}
		// A direct commit leaves its marker under the uploads prefix (what
		// makes a retried commit idempotent) until the controller's sweep
		// after the job; no controller runs here.
		committedMarker := strings.HasPrefix(oi.Key, upload.UploadsPrefix) && strings.HasSuffix(oi.Key, ".committed")
		if committedMarker {
			if err := c.RemoveObject(ctx, s3Bucket, oi.Key, minio.RemoveObjectOptions{}); err != nil {
				b.Fatal(err)
			}
			continue
		}
		if !want[oi.Key] || oi.Size != e.fx.size || !e.holdsFixture(ctx, c, oi) {
			b.Fatalf("%s: the bucket holds %s (%d bytes, ETag %s); want only %d objects of %d bytes, ETag %s (or stored in parts with CRC-64/NVME %s)",
				name, oi.Key, oi.Size, oi.ETag, e.sidecars, e.fx.size, e.fx.md5, e.fx.crc)
		}
		delete(want, oi.Key)
		if err := c.RemoveObject(ctx, s3Bucket, oi.Key, minio.RemoveObjectOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if len(want) > 0 {
		b.Fatalf("%s: %d objects missing", name, len(want))
	}
}

// key is sidecar i's object in a phase: its own job's prefix.
func (e *parallelEnv) key(phase string, i int) string {
	return jobOf(phase, i) + "/" + e.fx.rel
}

func jobOf(phase string, i int) string { return fmt.Sprintf("bench-%s-%d", phase, i) }

func tokenOf(i int) string { return fmt.Sprintf("%064x", i+1) }

// plainPut is the floor: one minio-go PUT of the file, straight to the store.
func (e *parallelEnv) plainPut(ctx context.Context, i int) (string, error) {
	c, err := e.s3Client()
	if err != nil {
		return "", err
	}
	f, err := os.Open(e.fx.path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	info, err := c.PutObject(ctx, s3Bucket, e.key("plain-put", i), f, e.fx.size,
		minio.PutObjectOptions{DisableMultipart: true, DisableContentSha256: true, ContentType: "application/octet-stream"})
	if err != nil {
		return "", err
	}
	if info.ETag != e.fx.md5 {
		return "", fmt.Errorf("plain PUT: ETag %s, want %s", info.ETag, e.fx.md5)
	}
	return "", nil
}

// sidecarPut is sidecar i: an Uploader with its own token and job.
func (e *parallelEnv) sidecarPut(ctx context.Context, i int, direct bool) (string, error) {
	phase := "proxy"
	if direct {
		phase = "direct"
	}
	tokenFile := filepath.Join(e.dir, fmt.Sprintf("token-%s-%d", phase, i))
	if err := os.WriteFile(tokenFile, []byte(tokenOf(i)), 0o600); err != nil {
		return "", err
	}
	url, _ := ctx.Value(serverURLKey{}).(string)
	up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: url, JobID: jobOf(phase, i), TokenFile: tokenFile, CAFile: e.caFile, MaxAttempts: 1,
		PodUID: benchutil.BenchPodUID})
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(e.fx.dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	res, err := up.UploadFile(ctx, root, e.fx.rel)
	if err != nil {
		return "", err
	}
	return "", checkResult(res, e.fx)
}

// ---- the control plane in its own process ----

// serverChild is the binding server's artifact endpoint in a child process
// (this test binary with childEnv=server), so its CPU is its own.
type serverChild struct {
	cmd   *exec.Cmd
	stdin io.Closer
	url   string
	done  chan error
}

// extraEnv are more childEnv+"_*" settings (runServerChild reads them).
func startServerChild(b *testing.B, e *parallelEnv, direct bool, extraEnv ...string) *serverChild {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=server",
		childEnv+"_S3="+e.s3.Endpoint, childEnv+"_CERT="+e.certFile, childEnv+"_KEY_FILE="+e.keyFile,
		childEnv+"_SIDECARS="+strconv.Itoa(e.sidecars), childEnv+"_DIRECT="+strconv.FormatBool(direct))
	cmd.Env = append(cmd.Env, extraEnv...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &serverChild{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening ") {
		_ = cmd.Process.Kill()
		b.Fatalf("server child: %q %v", line, err)
	}
	c.url = "https://" + strings.TrimSpace(strings.TrimPrefix(line, "listening "))
	go func() { c.done <- cmd.Wait() }()
	return c
}

func (c *serverChild) stop() {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// runServerChild serves the artifact endpoint (S3 backend) until stdin
// closes. Tokens tokenOf(i) hold jobs jobOf(phase, i), writable.
func runServerChild() int {
	env := func(k string) string { return os.Getenv(childEnv + "_" + k) }
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "server child:", err); return 1 }
	n, _ := strconv.Atoi(env("SIDECARS"))
	direct := env("DIRECT") == "true"
	phase := "proxy"
	if direct {
		phase = "direct"
	}
	certPEM, err := os.ReadFile(env("CERT"))
	if err != nil {
		return fail(err)
	}
	cert, err := tls.LoadX509KeyPair(env("CERT"), env("KEY_FILE"))
	if err != nil {
		return fail(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	backend, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: env("S3"), Secure: true, AccessKey: s3Access, SecretKey: s3Secret,
		Region: "us-east-1", Bucket: s3Bucket, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableCompression: true}})
	if err != nil {
		return fail(err)
	}
	jobs := map[string]endpoint.Job{}
	for i := range n {
		jobs[tokenOf(i)] = endpoint.Job{Namespace: "tether-bench", Name: jobOf(phase, i), JobID: jobOf(phase, i), Writable: true,
			Nodes: 1, Pods: map[int]string{0: benchutil.BenchPodUID}}
	}
	opts, err := childStoreOptions(backend, roots)
	if err != nil {
		return fail(err)
	}
	if configureDirect != nil {
		configureDirect(&opts, direct)
	}
	h := &endpoint.Handler{
		Store: store.New(backend, opts),
		Authorize: func(_ context.Context, token binding.Token) (endpoint.Job, error) {
			if j, ok := jobs[string(token)]; ok {
				return j, nil
			}
			return endpoint.Job{}, endpoint.Unauthorized("no binding holds this token")
		},
		Log: logr.Discard(),
	}
	if err := serveChild(h, cert); err != nil {
		return fail(err)
	}
	return 0
}

// childStoreOptions are a server child's store options: with
// childEnv_MULTIPART=true, bodies from childEnv_MP_THRESHOLD bytes are stored
// in parts of childEnv_MP_PART (either empty: the endpoint's default), the
// backend probed and its choice used, as the binding server does at start.
func childStoreOptions(backend *s3store.S3Backend, roots *x509.CertPool) (store.Options, error) {
	env := func(k string) string { return os.Getenv(childEnv + "_" + k) }
	if env("MULTIPART") != "true" {
		return store.Options{}, nil
	}
	var o store.MultipartOptions
	for _, v := range []struct {
		name string
		to   *int64
	}{{"MP_THRESHOLD", &o.Threshold}, {"MP_PART", &o.PartSize}} {
		if s := env(v.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return store.Options{}, fmt.Errorf("%s_%s=%q: want a byte count", childEnv, v.name, s)
			}
			*v.to = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableCompression: true}}
	caps, err := backend.Probe(ctx, client)
	if err != nil {
		return store.Options{}, fmt.Errorf("probing the store: %w", err)
	}
	ch, err := caps.Choose()
	if err != nil {
		return store.Options{}, fmt.Errorf("choosing how to verify uploads: %w", err)
	}
	if !ch.Multipart {
		return store.Options{}, fmt.Errorf("the probe says the store cannot verify multipart objects (%s)", ch.Why)
	}
	backend.Use(ch)
	return store.Options{Multipart: o}, nil
}

// serveChild serves h over TLS on a loopback port a child announces on
// stdout ("listening <addr>"), until its parent closes its stdin.
func serveChild(h *endpoint.Handler, cert tls.Certificate) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           endpoint.Route(h, http.NotFoundHandler()),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() {
		_ = srv.Serve(tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}))
	}()
	fmt.Printf("listening %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return srv.Close()
}

// procCPU is a process's user+system CPU (all its threads) from
// /proc/<pid>/stat; 0 if it cannot be read.
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: fields count from ')'.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on Linux (sysconf(_SC_CLK_TCK)).
const clockTicks = 100

// holdsFixture says whether oi is the fixture: by its ETag, or stored in
// parts (its ETag not an MD5) by the CRC-64/NVME the store keeps.
func (e *parallelEnv) holdsFixture(ctx context.Context, c *minio.Client, oi minio.ObjectInfo) bool {
	etag := strings.Trim(oi.ETag, `"`)
	if !upload.IsMultipartETag(etag) {
		return etag == e.fx.md5
	}
	st, err := c.StatObject(ctx, s3Bucket, oi.Key, minio.StatObjectOptions{Checksum: true})
	return err == nil && st.ChecksumCRC64NVME == e.fx.crc
}
