package upload_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/benchutil"
)

const (
	mib = 1 << 20
	gib = 1 << 30

	defaultSize   = 1 * gib
	defaultRounds = 3
	// smokeSize is the big file at smoke size (benchutil.Smoke).
	smokeSize = 16 * mib
	// warmupSize is the file each path uploads once, unmeasured, first.
	warmupSize = 4 * mib

	// childEnv switches the re-executed test binary into a child mode:
	// "upload" or "baseline". The child's parameters travel in childEnv+"_*".
	childEnv = "TETHER_BENCH_UPLOAD_CHILD"
)

func TestMain(m *testing.M) {
	switch mode := os.Getenv(childEnv); mode {
	case "":
	case "baseline", "upload", "upload-no-crc", "floor", "md5-floor":
		os.Exit(runChild(mode))
	case "server":
		os.Exit(runServerChild())
	case manifestServerMode:
		os.Exit(runManifestServerChild())
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want upload, floor, md5-floor or baseline\n", childEnv, mode)
		os.Exit(2)
	}
	code := m.Run()
	removeFixtures()
	os.Exit(code)
}

// ---- configuration ----

type benchConfig struct {
	size     int64  // the big file
	rounds   int    // measured rounds per path
	storeDir string // parent of the store's root; "" = the temp dir
}

func loadConfig(b *testing.B) benchConfig {
	b.Helper()
	c := benchConfig{size: benchutil.Size[int64](b, defaultSize, smokeSize), rounds: benchutil.Size(b, defaultRounds, 1),
		storeDir: os.Getenv("TETHER_BENCH_UPLOAD_STORE")}
	if s := os.Getenv("TETHER_BENCH_UPLOAD_SIZE"); s != "" {
		n, err := parseSize(s)
		if err != nil || n <= 0 || n > upload.MaxObjectSize {
			b.Fatalf("TETHER_BENCH_UPLOAD_SIZE=%q: want a size such as 64MiB or 1GiB, at most 5GiB", s)
		}
		c.size = n
	}
	if s := os.Getenv("TETHER_BENCH_UPLOAD_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("TETHER_BENCH_UPLOAD_ROUNDS=%q: want a positive integer", s)
		}
		c.rounds = n
	}
	return c
}

// parseSize reads "1073741824", "64M", "64MiB", "1G", "1GiB", "512K"...
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"GiB", gib}, {"MiB", mib}, {"KiB", 1 << 10}, {"G", gib}, {"M", mib}, {"K", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
			return v * u.mul, err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// sizeLabel names a size in metric units: 64m, 1g, 1536m, 12345b.
func sizeLabel(n int64) string {
	switch {
	case n%gib == 0:
		return fmt.Sprintf("%dg", n/gib)
	case n%mib == 0:
		return fmt.Sprintf("%dm", n/mib)
	}
	return fmt.Sprintf("%db", n)
}

// uploadTimeout bounds one upload: generous, but a hung server cannot keep
// the benchmark forever (at 8 MiB/s a 1 GiB upload takes 128s).
func uploadTimeout(size int64) time.Duration {
	return 2*time.Minute + time.Duration(size/(8*mib))*time.Second
}

// ---- the file ----

// fixture is a file in the shared fixture directory.
type fixture struct {
	dir, rel, path string
	size           int64
	md5            string
	// crc is the file's CRC-64/NVME (S3's form): what verifies a copy of it
	// stored in parts, whose ETag is not its MD5.
	crc string
}

var fixtures struct {
	mu  sync.Mutex
	dir string
	m   map[int64]*fixture
}

// getFixture returns the file of the given size, creating it on first use:
// 1 MiB random blocks, each stamped with its offset (no two blocks alike),
// fsynced (so no write-back of it competes with the store's fsyncs), then
// read once (its MD5, and a warm page cache for every upload that follows).
func getFixture(b *testing.B, size int64) *fixture {
	b.Helper()
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	if f := fixtures.m[size]; f != nil {
		return f
	}
	if fixtures.dir == "" {
		dir, err := os.MkdirTemp("", "tether-bench-upload-")
		if err != nil {
			b.Fatal(err)
		}
		fixtures.dir, fixtures.m = dir, map[int64]*fixture{}
	}
	fx := &fixture{dir: fixtures.dir, rel: "model-" + sizeLabel(size) + ".bin", size: size}
	fx.path = filepath.Join(fx.dir, fx.rel)
	start := time.Now()
	if err := writeFixture(fx.path, size); err != nil {
		b.Fatal(err)
	}
	written := time.Since(start)
	io0 := readProcIO()
	sum, crc, err := digestFile(fx.path)
	if err != nil {
		b.Fatal(err)
	}
	io1 := readProcIO()
	fx.md5, fx.crc = sum, crc
	fixtures.m[size] = fx
	progress("file %s: %d bytes, md5 %s; written and fsynced in %s, read once in %s (storage reads %d bytes: the page cache holds it)",
		fx.path, size, sum, written.Round(time.Millisecond), (time.Since(start) - written).Round(time.Millisecond), io1.readBytes-io0.readBytes)
	return fx
}

// progress writes a line to stderr as the run goes: go test keeps only the
// first 10 lines of a benchmark's log, so b.Log is kept for the summary.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "upload-bench: "+format+"\n", args...)
}

func writeFixture(path string, size int64) error {
	block := make([]byte, mib)
	if _, err := rand.Read(block); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for off := int64(0); off < size; off += mib {
		binary.LittleEndian.PutUint64(block, uint64(off))
		if _, err := f.Write(block[:min(mib, size-off)]); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// digestFile is the file's MD5 (hex) and CRC-64/NVME (S3's form).
func digestFile(path string) (string, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	h, c := md5.New(), upload.NewCRC64NVME()
	if _, err := io.Copy(io.MultiWriter(h, c), f); err != nil {
		return "", "", err
	}
	return hex.EncodeToString(h.Sum(nil)), upload.EncodeChecksum(c.Sum(nil)), nil
}

func removeFixtures() {
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	if fixtures.dir != "" {
		_ = os.RemoveAll(fixtures.dir)
	}
}

// ---- the server ----

// server is the artifact endpoint as the binding server serves it
// (benchutil.ArtifactServer), with counters of what it read from and wrote
// to its TCP connections.
type server struct {
	url       string
	token     string
	jobID     string
	tokenFile string
	caFile    string
	roots     *x509.CertPool
	backend   fsstore.FSBackend

	connRead, connWritten atomic.Int64
}

func startServer(b *testing.B, cfg benchConfig) *server {
	b.Helper()
	s := &server{}
	as := benchutil.StartArtifactServer(b, benchutil.ArtifactServerOptions{
		StoreParent: cfg.storeDir,
		Others:      discardRoute(),
		WrapListener: func(ln net.Listener) net.Listener {
			return &countingListener{Listener: ln, read: &s.connRead, written: &s.connWritten}
		},
	})
	s.url, s.token, s.jobID, s.tokenFile, s.caFile, s.backend = as.URL, as.Token, as.JobID, as.TokenFile, as.CAFile, as.Backend
	s.roots = x509.NewCertPool()
	s.roots.AppendCertsFromPEM(as.CertPEM)
	return s
}

func (s *server) key(rel string) string { return s.jobID + "/" + rel }

// discardPath takes a PUT and throws its body away: the transport floor
// (the same listener, TLS and http.Server, no artifact handler).
const discardPath = "/discard"

func discardRoute() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+discardPath+"/", func(w http.ResponseWriter, r *http.Request) {
		// The http.Server's 30 s ReadTimeout would cut a slow 1 GiB body.
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		buf := make([]byte, 256<<10)
		n, err := io.CopyBuffer(io.Discard, r.Body, buf)
		if err != nil || n != r.ContentLength {
			http.Error(w, fmt.Sprintf("read %d of %d bytes: %v", n, r.ContentLength, err), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

// checkStoredAndDelete checks that key holds the file, then deletes it.
func (s *server) checkStoredAndDelete(ctx context.Context, key string, fx *fixture) error {
	info, err := s.backend.Head(ctx, key)
	if err != nil {
		return fmt.Errorf("stored %s: %w", key, err)
	}
	if info.Size != fx.size || info.ETag != fx.md5 {
		return fmt.Errorf("stored %s: size %d etag %s, want %d %s", key, info.Size, info.ETag, fx.size, fx.md5)
	}
	return s.backend.Delete(ctx, key)
}

func (s *server) checkAbsent(ctx context.Context, key string) error {
	if _, err := s.backend.Head(ctx, key); !errors.Is(err, upload.ErrNotFound) {
		return fmt.Errorf("%s is stored before the upload (%v): the uploader would not send it", key, err)
	}
	return nil
}

// countingListener counts the bytes its connections read and write.
type countingListener struct {
	net.Listener
	read, written *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: l.read, written: l.written}, nil
}

type countingConn struct {
	net.Conn
	read, written *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// ---- the two paths ----

// newUploaderWith: noTrailer sends the body without its CRC-64/NVME
// trailer (the Uploader before the checksum was added, to the same server).
func (s *server) newUploaderWith(noTrailer bool) (*artifacts.Uploader, error) {
	// The sidecar's configuration (cmd/sidecar), defaults otherwise.
	return artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: s.url, JobID: s.jobID, TokenFile: s.tokenFile, CAFile: s.caFile, NoTrailer: noTrailer,
		PodUID: benchutil.BenchPodUID})
}

// uploaderPut uploads fx with a new Uploader (a new connection, nothing
// verified yet) and checks that it sent the file and verified it.
func (s *server) uploaderPut(ctx context.Context, fx *fixture) error {
	return s.uploaderPutWith(ctx, fx, false)
}

func (s *server) uploaderPutWith(ctx context.Context, fx *fixture, noTrailer bool) error {
	up, err := s.newUploaderWith(noTrailer)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(fx.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	res, err := up.UploadFile(ctx, root, fx.rel)
	if err != nil {
		return err
	}
	return checkResult(res, fx)
}

func checkResult(res artifacts.Result, fx *fixture) error {
	if res.How != artifacts.Uploaded || res.Attempts != 1 || res.Size != fx.size || res.MD5 != fx.md5 {
		return fmt.Errorf("uploader result %+v, want uploaded in 1 attempt, size %d, md5 %s", res, fx.size, fx.md5)
	}
	return nil
}

// floorTransport has the Uploader's HTTP and TLS client settings
// (pkg/artifacts.NewUploader and its dialTLS) and trusts roots.
func floorTransport(serverURL string, roots *x509.CertPool) *http.Transport {
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(serverURL, "https://"))
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second},
		Config:    &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: host, NextProtos: []string{"http/1.1"}},
	}
	return &http.Transport{
		Proxy:                 nil,
		DialTLSContext:        d.DialContext,
		ResponseHeaderTimeout: 2 * time.Minute,
		ExpectContinueTimeout: 2 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
	}
}

// floorPut is the least an upload does: one PUT of the open file with its
// size and the token; the answer's ETag must be wantMD5 (known beforehand:
// the floor computes nothing).
//
// With hashBody, the body is the file teed into an MD5 and the ETag must
// equal that MD5 instead: the least a *verified* upload does (the contract
// wants the MD5 of the bytes sent, computed while sending them), without
// anything else the Uploader does (HEAD, Expect: 100-continue, minio-go,
// progress and stall tracking, retries).
func floorPut(ctx context.Context, tr *http.Transport, serverURL, token, key, path string, size int64, wantMD5 string, hashBody bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	var body io.ReadCloser = f
	h := md5.New()
	if hashBody {
		body = &teeFile{Reader: io.TeeReader(f, h), f: f}
	}
	target := serverURL + "/" + upload.Bucket + "/" + key
	if wantMD5 == "" && !hashBody {
		// The transport floor: the discarding handler, no ETag.
		target = serverURL + discardPath + "/" + key
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, target, body)
	if err != nil {
		f.Close()
		return err
	}
	req.ContentLength = size
	req.Header.Set(names.HeaderArtifactToken, token)
	req.Header.Set(names.HeaderArtifactPodUID, benchutil.BenchPodUID)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := tr.RoundTrip(req) // closes the body
	if err != nil {
		return err
	}
	msg, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("floor PUT %s: HTTP %d: %s", key, resp.StatusCode, msg)
	}
	if hashBody {
		wantMD5 = hex.EncodeToString(h.Sum(nil))
	}
	if wantMD5 == "" {
		return nil
	}
	if etag := strings.Trim(resp.Header.Get("ETag"), `"`); etag != wantMD5 {
		return fmt.Errorf("floor PUT %s: ETag %q, want %s", key, etag, wantMD5)
	}
	return nil
}

// teeFile is a request body that hashes what the transport reads.
type teeFile struct {
	io.Reader
	f *os.File
}

func (t *teeFile) Close() error { return t.f.Close() }

// ---- measurement ----

// sample is one measured upload.
type sample struct {
	elapsed, cpu time.Duration
	// rchar: bytes the process read (any file or socket); readBytes: bytes
	// it caused to be read from storage (0 with a warm page cache).
	rchar, readBytes int64
	// connRead, connWritten: what the server read from / wrote to its TCP
	// connections (the client, in this process, reads what it wrote).
	connRead, connWritten int64
}

// fileBytes is what the process read besides the server's socket reads and
// the client's reads of the server's answers: the file, and a few hundred
// bytes of token, CA and /proc/self/io.
func (x sample) fileBytes() int64 { return x.rchar - x.connRead - x.connWritten }

func (s *server) measure(f func() error) (sample, error) {
	io0 := readProcIO()
	r0, w0 := s.connRead.Load(), s.connWritten.Load()
	cpu0 := benchutil.ProcessCPU()
	start := time.Now()
	err := f()
	elapsed := time.Since(start)
	cpu1 := benchutil.ProcessCPU()
	r1, w1 := s.connRead.Load(), s.connWritten.Load()
	io1 := readProcIO()
	return sample{elapsed: elapsed, cpu: cpu1 - cpu0, rchar: io1.rchar - io0.rchar, readBytes: io1.readBytes - io0.readBytes,
		connRead: r1 - r0, connWritten: w1 - w0}, err
}

type procIO struct{ rchar, readBytes int64 }

// readProcIO reads this process's I/O counters (all threads).
func readProcIO() procIO { return readProcIOFile("/proc/self/io") }

// readProcIOFile reads the I/O counters of /proc/<pid>/io; -1 each if it
// cannot be read.
func readProcIOFile(file string) procIO {
	raw, err := os.ReadFile(file)
	if err != nil {
		return procIO{-1, -1}
	}
	var p procIO
	for line := range strings.Lines(string(raw)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "rchar":
			p.rchar = n
		case "read_bytes":
			p.readBytes = n
		}
	}
	return p
}

func mibPerSec(size int64, d time.Duration) float64 {
	return float64(size) / mib / d.Seconds()
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ---- BenchmarkSinglePut1GiB ----

// uploadPath is one way of uploading the file, and what its rounds measured.
type uploadPath struct {
	name    string
	put     func(ctx context.Context, key string, fx *fixture) error
	key     func(round int, fx *fixture) string
	samples []sample
	// discard: nothing is stored (the transport floor).
	discard bool
}

// BenchmarkSinglePut1GiB: see the package documentation.
func BenchmarkSinglePut1GiB(b *testing.B) {
	cfg := loadConfig(b)
	s := startServer(b, cfg)
	fx := getFixture(b, cfg.size)
	warm := getFixture(b, warmupSize)
	ctx := b.Context()

	floorVariant := func(hashBody, discard bool) func(context.Context, string, *fixture) error {
		return func(ctx context.Context, key string, fx *fixture) error {
			tr := floorTransport(s.url, s.roots) // a new connection, as the Uploader's
			defer tr.CloseIdleConnections()
			want := fx.md5
			if discard {
				want = ""
			}
			return floorPut(ctx, tr, s.url, s.token, key, fx.path, fx.size, want, hashBody)
		}
	}
	const floor, md5Floor, uploader, transport, noCRC = 0, 1, 2, 3, 4
	paths := []*uploadPath{
		floor: {name: "floor", put: floorVariant(false, false),
			key: func(i int, fx *fixture) string { return s.key(fmt.Sprintf("floor/%d-%s", i, fx.rel)) }},
		md5Floor: {name: "md5-floor", put: floorVariant(true, false),
			key: func(i int, fx *fixture) string { return s.key(fmt.Sprintf("md5-floor/%d-%s", i, fx.rel)) }},
		// The Uploader's key is <job-id>/<rel>: the same every round, so the
		// round before deleted it.
		uploader: {name: "uploader", put: func(ctx context.Context, _ string, fx *fixture) error { return s.uploaderPut(ctx, fx) },
			key: func(_ int, fx *fixture) string { return s.key(fx.rel) }},
		// The same bytes over the same kind of connection into a handler
		// that discards them: what TLS and HTTP alone cost.
		transport: {name: "transport", put: floorVariant(false, true), discard: true,
			key: func(i int, fx *fixture) string { return s.key(fmt.Sprintf("transport/%d-%s", i, fx.rel)) }},
		// The Uploader without the CRC-64/NVME trailer: what the checksum
		// (aws-chunked framing, its hashing on both sides) costs.
		noCRC: {name: "uploader-no-crc", put: func(ctx context.Context, _ string, fx *fixture) error { return s.uploaderPutWith(ctx, fx, true) },
			key: func(_ int, fx *fixture) string { return s.key(fx.rel) }},
	}
	round := func(p *uploadPath, i int, fx *fixture) (sample, error) {
		key := p.key(i, fx)
		if err := s.checkAbsent(ctx, key); err != nil {
			return sample{}, err
		}
		uctx, cancel := context.WithTimeout(ctx, uploadTimeout(fx.size))
		defer cancel()
		x, err := s.measure(func() error { return p.put(uctx, key, fx) })
		if err == nil && !p.discard {
			err = s.checkStoredAndDelete(ctx, key, fx)
		}
		if err == nil && p.discard {
			err = s.checkAbsent(ctx, key)
		}
		return x, err
	}

	// Unmeasured: code paths, TLS, the store's directories.
	for _, p := range paths {
		if _, err := round(p, -1, warm); err != nil {
			b.Fatalf("%s warmup: %v", p.name, err)
		}
	}
	b.Logf("%d-byte file (md5 %s, page cache warm), %d rounds per path in turn (floor, md5-floor, uploader, transport, floor, ...), store %s, GOMAXPROCS %d",
		fx.size, fx.md5, cfg.rounds, s.backend.Root, runtime.GOMAXPROCS(0))

	pressure := benchutil.CPUPressure()
	for b.Loop() {
		for i := range cfg.rounds {
			for _, p := range paths {
				runtime.GC()
				x, err := round(p, i, fx)
				if err != nil {
					b.Fatalf("%s round %d: %v", p.name, i, err)
				}
				p.samples = append(p.samples, x)
				logSample(p.name, i, fx.size, x)
			}
		}
	}
	b.StopTimer()
	b.Logf("CPU pressure before: %s; after: %s", pressure, benchutil.CPUPressure())

	type summary struct {
		rate, best, cpuPerGiB, worstReadRatio float64
		worst                                 sample // the round with the worst read ratio
		rates                                 []string
	}
	sum := func(p *uploadPath) summary {
		var els, cpus []time.Duration
		var sm summary
		for _, x := range p.samples {
			els, cpus = append(els, x.elapsed), append(cpus, x.cpu)
			sm.rates = append(sm.rates, fmt.Sprintf("%.1f", mibPerSec(fx.size, x.elapsed)))
			if r := float64(x.fileBytes()) / float64(fx.size); r >= sm.worstReadRatio {
				sm.worstReadRatio, sm.worst = r, x
			}
		}
		sm.rate = mibPerSec(fx.size, median(els))
		sm.best = mibPerSec(fx.size, slices.Min(els))
		sm.cpuPerGiB = median(cpus).Seconds() / (float64(fx.size) / gib)
		return sm
	}
	fl, mf, up, tp, nc := sum(paths[floor]), sum(paths[md5Floor]), sum(paths[uploader]), sum(paths[transport]), sum(paths[noCRC])
	for _, x := range []struct {
		name string
		sm   summary
	}{{"floor", fl}, {"md5-floor", mf}, {"uploader", up}, {"transport", tp}, {"uploader-no-crc", nc}} {
		w := x.sm.worst
		b.Logf("%-9s median %6.1f MiB/s (rounds: %s), process CPU %.2fs/GiB; read ratio %.6f (worst round: process read %d B - server socket reads %d B - server's answers %d B = %d B; storage reads %d B)",
			x.name, x.sm.rate, strings.Join(x.sm.rates, " "), x.sm.cpuPerGiB, x.sm.worstReadRatio,
			w.rchar, w.connRead, w.connWritten, w.fileBytes(), w.readBytes)
	}

	b.ReportMetric(up.rate, "mib-per-s")
	b.ReportMetric(fl.rate, "floor-mib-per-s")
	b.ReportMetric(up.rate/fl.rate, "x-raw")
	// Best round against best round: what each path does when neighbours
	// leave the cores alone for a whole round.
	b.ReportMetric(up.best/fl.best, "x-raw-best")
	b.ReportMetric(up.worstReadRatio, "read-ratio")
	b.ReportMetric(fl.worstReadRatio, "floor-read-ratio")
	b.ReportMetric(mf.rate, "md5-floor-mib-per-s")
	b.ReportMetric(up.rate/mf.rate, "x-md5-floor")
	b.ReportMetric(up.cpuPerGiB, "cpu-s-per-gib")
	b.ReportMetric(fl.cpuPerGiB, "floor-cpu-s-per-gib")
	b.ReportMetric(mf.cpuPerGiB, "md5-floor-cpu-s-per-gib")
	b.ReportMetric(up.cpuPerGiB/fl.cpuPerGiB, "x-cpu")
	b.ReportMetric(tp.rate, "transport-mib-per-s")
	b.ReportMetric(up.rate/tp.rate, "x-transport")
	b.ReportMetric(tp.cpuPerGiB, "transport-cpu-s-per-gib")
	// The checksum's cost: the Uploader with it against the Uploader
	// without it, and each against the same floor (target: x-crc >= 0.95).
	b.ReportMetric(nc.rate, "no-crc-mib-per-s")
	b.ReportMetric(nc.rate/fl.rate, "x-raw-no-crc")
	b.ReportMetric(up.rate/nc.rate, "x-crc")
	b.ReportMetric(up.best/nc.best, "x-crc-best")
	b.ReportMetric(nc.cpuPerGiB, "no-crc-cpu-s-per-gib")
	b.ReportMetric(up.cpuPerGiB/nc.cpuPerGiB, "x-crc-cpu")
}

func logSample(path string, round int, size int64, x sample) {
	progress("%-9s round %d: %7.3fs %7.1f MiB/s, process CPU %.2fs | read: process %d B, server sockets %d B, server's answers %d B -> file %d B = %.6f x size (storage reads %d B)",
		path, round, x.elapsed.Seconds(), mibPerSec(size, x.elapsed), x.cpu.Seconds(),
		x.rchar, x.connRead, x.connWritten, x.fileBytes(), float64(x.fileBytes())/float64(size), x.readBytes)
}

// ---- BenchmarkUploaderRSS ----

// childReport is what a child prints (one JSON line on stdout).
type childReport struct {
	Mode     string           `json:"mode"`
	Result   artifacts.Result `json:"result"`
	Err      string           `json:"err,omitempty"`
	HWMStart int64            `json:"hwmStartKiB"` // VmHWM when the child started its work
	HWM      int64            `json:"hwmKiB"`      // VmHWM at the end: the peak RSS
	RSS      int64            `json:"rssKiB"`      // VmRSS at the end
	// Around the upload:
	Rchar   int64         `json:"rchar"`
	ReadB   int64         `json:"readBytes"`
	Elapsed time.Duration `json:"elapsed"`
	CPU     time.Duration `json:"cpu"`
}

func serverCPUPerGiB(c childRun, fx *fixture) float64 {
	return c.serverCPU.Seconds() / (float64(fx.size) / gib)
}

// childRun is a child's report and what the parent saw of it.
type childRun struct {
	rep childReport
	// connWritten: what the server wrote to the child's connections.
	connWritten int64
	// serverCPU: this process's CPU while the child ran: the server's (and
	// starting the child, a few ms).
	serverCPU time.Duration
}

// BenchmarkUploaderRSS: see the package documentation.
func BenchmarkUploaderRSS(b *testing.B) {
	cfg := loadConfig(b)
	s := startServer(b, cfg)
	small := getFixture(b, benchutil.Size[int64](b, 64*mib, 4*mib))
	bigFx := getFixture(b, cfg.size)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()

	// run re-executes this binary in a child mode; for "upload" and "floor"
	// it checks what the child stored and deletes it.
	run := func(mode string, fx *fixture) childRun {
		b.Helper()
		env := append(os.Environ(), childEnv+"="+mode)
		timeout := time.Minute
		key := ""
		if fx != nil {
			key = s.key(fx.rel)
			if mode != "upload" && mode != "upload-no-crc" {
				key = s.key(mode + "/" + fx.rel)
			}
			if err := s.checkAbsent(ctx, key); err != nil {
				b.Fatal(err)
			}
			timeout = uploadTimeout(fx.size)
			env = append(env,
				childEnv+"_URL="+s.url, childEnv+"_JOB="+s.jobID, childEnv+"_TOKEN_FILE="+s.tokenFile,
				childEnv+"_CA_FILE="+s.caFile, childEnv+"_DIR="+fx.dir, childEnv+"_REL="+fx.rel,
				childEnv+"_KEY="+key, childEnv+"_SIZE="+strconv.FormatInt(fx.size, 10), childEnv+"_MD5="+fx.md5,
				childEnv+"_TIMEOUT="+timeout.String())
		}
		cctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, exe)
		cmd.Env = env
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		w0 := s.connWritten.Load()
		cpu0 := benchutil.ProcessCPU()
		err := cmd.Run()
		cr := childRun{connWritten: s.connWritten.Load() - w0, serverCPU: benchutil.ProcessCPU() - cpu0}
		if err != nil {
			b.Fatalf("child %s: %v\nstdout: %s\nstderr: %s", mode, err, stdout.String(), stderr.String())
		}
		if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &cr.rep); err != nil {
			b.Fatalf("child %s: %v in its output %q (stderr %q)", mode, err, stdout.String(), stderr.String())
		}
		if cr.rep.Err != "" {
			b.Fatalf("child %s: %s", mode, cr.rep.Err)
		}
		if mode == "upload" || mode == "upload-no-crc" {
			if err := checkResult(cr.rep.Result, fx); err != nil {
				b.Fatalf("child: %v", err)
			}
		}
		if fx != nil {
			if err := s.checkStoredAndDelete(ctx, key, fx); err != nil {
				b.Fatal(err)
			}
		}
		return cr
	}

	var base, r64, rBig, fBig, mBig, nBig childRun
	for b.Loop() {
		base = run("baseline", nil)
		r64 = run("upload", small)
		rBig = run("upload", bigFx)
		nBig = run("upload-no-crc", bigFx)
		fBig = run("floor", bigFx)
		mBig = run("md5-floor", bigFx)
	}
	b.StopTimer()

	kib := func(n int64) float64 { return float64(n) / 1024 }
	readRatio := func(c childRun, fx *fixture) float64 {
		return float64(c.rep.Rchar-c.connWritten) / float64(fx.size)
	}
	perGiB := func(c childRun, fx *fixture) float64 { return c.rep.CPU.Seconds() / (float64(fx.size) / gib) }
	b.Logf("baseline: peak RSS %.1f MiB", kib(base.rep.HWM))
	for _, c := range []struct {
		name string
		r    childRun
		fx   *fixture
	}{{"uploader", r64, small}, {"uploader", rBig, bigFx}, {"no-crc", nBig, bigFx}, {"floor", fBig, bigFx}, {"md5-floor", mBig, bigFx}} {
		b.Logf("%-9s %s: peak RSS %.1f MiB (%.1f MiB before the upload, %.1f MiB at the end); %.2fs, %.1f MiB/s, child CPU %.2fs (%.2fs per GiB); child read %d B, server wrote %d B to it -> file %d B = %.6f x size (storage reads %d B)",
			c.name, sizeLabel(c.fx.size), kib(c.r.rep.HWM), kib(c.r.rep.HWMStart), kib(c.r.rep.RSS),
			c.r.rep.Elapsed.Seconds(), mibPerSec(c.fx.size, c.r.rep.Elapsed), c.r.rep.CPU.Seconds(), perGiB(c.r, c.fx),
			c.r.rep.Rchar, c.r.connWritten, c.r.rep.Rchar-c.r.connWritten, readRatio(c.r, c.fx), c.r.rep.ReadB)
	}
	b.ReportMetric(kib(base.rep.HWM), "rss-mib-baseline")
	b.ReportMetric(kib(r64.rep.HWM), "rss-mib-"+sizeLabel(small.size))
	if bigFx != small {
		b.ReportMetric(kib(rBig.rep.HWM), "rss-mib-"+sizeLabel(bigFx.size))
	}
	b.ReportMetric(kib(fBig.rep.HWM), "floor-rss-mib-"+sizeLabel(bigFx.size))
	b.ReportMetric(readRatio(rBig, bigFx), "read-ratio-child")
	// The client's CPU alone (the server is in the parent).
	b.ReportMetric(perGiB(rBig, bigFx), "child-cpu-s-per-gib")
	// The sidecar's CPU with the CRC-64/NVME trailer against without it.
	b.ReportMetric(perGiB(nBig, bigFx), "no-crc-child-cpu-s-per-gib")
	b.ReportMetric(perGiB(rBig, bigFx)/perGiB(nBig, bigFx), "x-crc-child-cpu")
	b.ReportMetric(serverCPUPerGiB(rBig, bigFx)/serverCPUPerGiB(nBig, bigFx), "x-crc-server-cpu")
	b.ReportMetric(perGiB(fBig, bigFx), "floor-child-cpu-s-per-gib")
	b.ReportMetric(perGiB(mBig, bigFx), "md5-floor-child-cpu-s-per-gib")
	// The server's CPU alone (the client is in the child).
	serverPerGiB := func(c childRun) float64 { return c.serverCPU.Seconds() / (float64(bigFx.size) / gib) }
	b.Logf("server CPU per GiB: uploader %.2fs, floor %.2fs, md5-floor %.2fs", serverPerGiB(rBig), serverPerGiB(fBig), serverPerGiB(mBig))
	b.ReportMetric(serverPerGiB(rBig), "server-cpu-s-per-gib")
	b.ReportMetric(serverPerGiB(fBig), "floor-server-cpu-s-per-gib")

	// The hash the server cannot skip, on this machine now: the server's CPU
	// is judged against it in the same run (server-cpu-x-md5), not against
	// an absolute figure, which moves with the CPU and its neighbours.
	md5PerGiB := md5CPUPerGiB(benchutil.Size[int64](b, gib, 64*mib))
	b.Logf("MD5 alone in this process: %.2fs per GiB (%.0f MiB/s); the server's PUT costs %.2fx that, %.2fs per GiB besides it",
		md5PerGiB, 1024/md5PerGiB, serverPerGiB(rBig)/md5PerGiB, serverPerGiB(rBig)-md5PerGiB)
	b.ReportMetric(md5PerGiB, "md5-cpu-s-per-gib")
	b.ReportMetric(serverPerGiB(rBig)/md5PerGiB, "server-cpu-x-md5")
	b.ReportMetric(serverPerGiB(rBig)-md5PerGiB, "server-cpu-over-md5-s-per-gib")
}

// md5CPUPerGiB is this process's CPU per GiB hashing n bytes (1 GiB; less
// at smoke size) from memory on one goroutine (the best of three, so a
// neighbour's burst is not counted): what the server's one MD5 of a body
// costs at best.
func md5CPUPerGiB(n int64) float64 {
	buf := make([]byte, mib)
	_, _ = rand.Read(buf)
	best := time.Duration(1<<63 - 1)
	for range 3 {
		h := md5.New()
		cpu0 := benchutil.ProcessCPU()
		for range n / mib {
			h.Write(buf)
		}
		_ = h.Sum(nil)
		best = min(best, benchutil.ProcessCPU()-cpu0)
	}
	return best.Seconds() * gib / float64(n)
}

// runChild is the re-executed test binary: it prints one childReport.
func runChild(mode string) int {
	rep := childReport{Mode: mode}
	rep.HWMStart, _ = procStatusKiB("VmHWM")
	if mode != "baseline" {
		if err := childUpload(mode, &rep); err != nil {
			rep.Err = err.Error()
		}
	}
	rep.HWM, _ = procStatusKiB("VmHWM")
	rep.RSS, _ = procStatusKiB("VmRSS")
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// childUpload uploads the file with the Uploader ("upload") or the plain
// PUT ("floor"), measuring rchar, time and CPU around it.
func childUpload(mode string, rep *childReport) error {
	env := func(k string) string { return os.Getenv(childEnv + "_" + k) }
	timeout, err := time.ParseDuration(env("TIMEOUT"))
	if err != nil {
		return err
	}
	size, err := strconv.ParseInt(env("SIZE"), 10, 64)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	var put func() error
	switch mode {
	case "upload", "upload-no-crc":
		up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: env("URL"), JobID: env("JOB"), TokenFile: env("TOKEN_FILE"), CAFile: env("CA_FILE"),
			NoTrailer: mode == "upload-no-crc", PodUID: benchutil.BenchPodUID, DirectMinSize: envInt64(env("DIRECT_MIN")),
			ResumeMinSize: envInt64(env("RESUME_MIN"))})
		if err != nil {
			return err
		}
		root, err := os.OpenRoot(env("DIR"))
		if err != nil {
			return err
		}
		defer root.Close()
		put = func() error {
			res, err := up.UploadFile(ctx, root, env("REL"))
			rep.Result = res
			return err
		}
	case "floor", "md5-floor":
		token, err := os.ReadFile(env("TOKEN_FILE"))
		if err != nil {
			return err
		}
		caPEM, err := os.ReadFile(env("CA_FILE"))
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(caPEM)
		tr := floorTransport(env("URL"), roots)
		defer tr.CloseIdleConnections()
		put = func() error {
			return floorPut(ctx, tr, env("URL"), strings.TrimSpace(string(token)), env("KEY"),
				filepath.Join(env("DIR"), env("REL")), size, env("MD5"), mode == "md5-floor")
		}
	default:
		return fmt.Errorf("unknown child mode %q", mode)
	}
	// TETHER_BENCH_UPLOAD_CHILD_CPUPROFILE=<prefix>: a CPU profile of the
	// upload alone, in <prefix>.<mode>-<size>.
	if prefix := env("CPUPROFILE"); prefix != "" {
		f, err := os.Create(prefix + "." + mode + "-" + sizeLabel(size))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	io0 := readProcIO()
	cpu0 := benchutil.ProcessCPU()
	start := time.Now()
	err = put()
	rep.Elapsed = time.Since(start)
	rep.CPU = benchutil.ProcessCPU() - cpu0
	io1 := readProcIO()
	rep.Rchar, rep.ReadB = io1.rchar-io0.rchar, io1.readBytes-io0.readBytes
	return err
}

// envInt64 is a child's optional integer setting; "" (or not a number)
// is 0, the Uploader's default.
func envInt64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// procStatusKiB reads a "kB" field of /proc/self/status.
func procStatusKiB(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/self/status", field)
}

// ---- helpers ----
