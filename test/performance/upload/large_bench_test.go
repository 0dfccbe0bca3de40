package upload_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/benchutil"
)

const (
	defaultLargeSize = 6 * gib
	// smokeLargePart is the endpoint's threshold and part size at smoke
	// size, so the 16 MiB file is still stored in parts.
	smokeLargePart = 5 * mib
	// largeCutPercent is where the resume measurement cuts the first PUT.
	largeCutPercent = 60
)

// largeBench is BenchmarkLargeFile's setup: versitygw, the file, and the
// endpoint's multipart settings.
type largeBench struct {
	e         *parallelEnv
	fx        *fixture
	threshold int64 // the endpoint's multipart threshold (0: its default)
	partBase  int64 // the endpoint's part size setting (0: its default)
	partSize  int64 // the parts it stores this file in
	tokenFile string
	disk      *diskPeak
}

// BenchmarkLargeFile measures one large file (TETHER_BENCH_LARGE_SIZE,
// default 6 GiB; 16 MiB at smoke size, with the endpoint's threshold and part
// size 5 MiB so it is still stored in parts) stored in parts on versitygw,
// in one run:
//
//   - hash: one MD5 + CRC-64/NVME pass over the file's bytes read into memory
//     (chunk by chunk), the CPU of the hashing alone: the least the control
//     plane must spend on the body;
//   - floor: minio-go's multipart upload of the file from this process
//     straight to the store, in the endpoint's part size, with Content-MD5 per
//     part and a full-object CRC-64/NVME (AutoChecksum: minio-go v7.4.1 drops
//     SendContentMd5 when Checksum is set; CRC-64/NVME is full-object by
//     nature);
//   - proxy: the sidecar's Uploader in a child process (its VmHWM is
//     large-sidecar-rss-mib) sending the file through the artifact endpoint,
//     itself in a child process (its CPU, from /proc/<pid>/stat, is the
//     control plane's) with the S3 backend probed and used, which stores it
//     in parts;
//   - direct: the same children with direct uploads on (the Uploader's
//     DirectMinSize default): authorize answers "direct-parts", the Uploader
//     sends the parts to their presigned URLs on versitygw and commits with
//     their MD5s, and the server child completes the upload.
//     direct-mib-per-s, large-direct-x-floor (direct over floor) and
//     large-direct-cp-cpu-s-per-gib (the server child's CPU during the
//     upload per GiB of the file);
//   - resume: the Uploader's PUT cut after 60% of the file, then a new
//     Uploader sending it again: what it re-sends of the first 60% (the cut
//     point less Result.Resumed) in parts is large-resume-resent-parts (the
//     part in flight at the cut, so below 1 when resuming works).
//
// Every stored object is checked (size, CRC-64/NVME, part 1 of the part size) and
// the bucket emptied after each measurement; the file is removed at the end.
// That the body went through the endpoint in proxy and not in direct is
// checked on the server child's rchar (/proc/<pid>/io) during the upload:
// at least the file's size in proxy, less than one part in direct.
func BenchmarkLargeFile(b *testing.B) {
	lb := setupLargeBench(b)
	ctx := b.Context()
	var (
		hashCPU           time.Duration
		crc               string
		floor             time.Duration
		proxy, direct     childPut
		resumed, cutPoint int64
	)
	for b.Loop() {
		hashCPU, crc = lb.hashPass(b)
		floor = lb.floorPut(b, ctx, crc)
		proxy = lb.sidecarPut(b, crc, false)
		direct = lb.sidecarPut(b, crc, true)
		resumed, cutPoint = lb.resumePut(b, ctx, crc)
	}
	b.StopTimer()
	size := lb.fx.size
	floorRate, proxyRate, directRate := mibPerSec(size, floor), mibPerSec(size, proxy.elapsed), mibPerSec(size, direct.elapsed)
	resentParts := float64(cutPoint-resumed) / float64(lb.partSize)
	gibs := float64(size) / gib
	b.Logf("large file %d bytes in parts of %d: hash pass %.2f CPU-s; floor %.2fs (%.1f MiB/s)", size, lb.partSize, hashCPU.Seconds(), floor.Seconds(), floorRate)
	b.Logf("proxy %.2fs (%.1f MiB/s, control plane %.2f CPU-s = %.2fx the hash pass, read %d bytes; sidecar peak RSS %.1f MiB)",
		proxy.elapsed.Seconds(), proxyRate, proxy.cpCPU.Seconds(), proxy.cpCPU.Seconds()/hashCPU.Seconds(), proxy.cpRead, float64(proxy.hwmKiB)/1024)
	b.Logf("direct %.2fs (%.1f MiB/s, control plane %.2f CPU-s, read %d bytes; sidecar peak RSS %.1f MiB)",
		direct.elapsed.Seconds(), directRate, direct.cpCPU.Seconds(), direct.cpRead, float64(direct.hwmKiB)/1024)
	b.Logf("resume: cut at %d, resumed at %d, %d bytes (%.2f parts) sent again", cutPoint, resumed, cutPoint-resumed, resentParts)
	b.ReportMetric(floorRate, "floor-mib-per-s")
	b.ReportMetric(proxyRate, "proxy-mib-per-s")
	b.ReportMetric(proxyRate/floorRate, "large-proxy-x-floor")
	b.ReportMetric(proxy.cpCPU.Seconds()/hashCPU.Seconds(), "large-proxy-cp-cpu-x-hash")
	b.ReportMetric(directRate, "direct-mib-per-s")
	b.ReportMetric(directRate/floorRate, "large-direct-x-floor")
	b.ReportMetric(direct.cpCPU.Seconds()/gibs, "large-direct-cp-cpu-s-per-gib")
	b.ReportMetric(float64(proxy.hwmKiB)/1024, "large-sidecar-rss-mib")
	b.ReportMetric(resentParts, "large-resume-resent-parts")
	b.ReportMetric(float64(lb.disk.peak.Load())/mib, "large-peak-disk-mib")
}

func setupLargeBench(b *testing.B) *largeBench {
	b.Helper()
	size := benchutil.Size[int64](b, defaultLargeSize, smokeSize)
	if s := os.Getenv("TETHER_BENCH_LARGE_SIZE"); s != "" {
		n, err := parseSize(s)
		if err != nil || n <= 0 || n > upload.MaxObjectSize {
			b.Fatalf("TETHER_BENCH_LARGE_SIZE=%q: want a size such as 256MiB or 6GiB, at most 5 TiB", s)
		}
		size = n
	}
	lb := &largeBench{threshold: benchutil.Size[int64](b, 0, smokeLargePart), partBase: benchutil.Size[int64](b, 0, smokeLargePart)}
	if threshold := cmpOr(lb.threshold, upload.DefaultMultipartThreshold); size < threshold {
		b.Fatalf("the large file (%d bytes) is below the endpoint's multipart threshold (%d): set TETHER_BENCH_LARGE_SIZE to at least that", size, threshold)
	}
	lb.partSize = upload.PartSize(size, lb.partBase)
	lb.fx = getFixture(b, size)
	b.Cleanup(func() { dropFixture(lb.fx) })
	lb.e = startParallelEnv(b, 1, lb.fx)
	lb.tokenFile = filepath.Join(lb.e.dir, "token-large")
	if err := os.WriteFile(lb.tokenFile, []byte(tokenOf(0)), 0o600); err != nil {
		b.Fatal(err)
	}
	lb.disk = watchDisk(filepath.Join(lb.e.dir, "s3"))
	b.Cleanup(lb.disk.stop)
	return lb
}

func cmpOr(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// dropFixture removes a fixture's file now (a large one should not wait for
// the end of every benchmark).
func dropFixture(fx *fixture) {
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	delete(fixtures.m, fx.size)
	_ = os.Remove(fx.path)
}

// hashPass is one MD5 + CRC-64/NVME pass over the file, read into memory
// 64 MiB at a time; only the hashing's CPU is counted. It returns the
// CRC-64/NVME (S3's form) every stored object must have.
func (lb *largeBench) hashPass(b *testing.B) (time.Duration, string) {
	b.Helper()
	f, err := os.Open(lb.fx.path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64*mib)
	m, c := md5.New(), upload.NewCRC64NVME()
	var cpu time.Duration
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			cpu0 := benchutil.ProcessCPU()
			_, _ = m.Write(buf[:n])
			_, _ = c.Write(buf[:n])
			cpu += benchutil.ProcessCPU() - cpu0
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	if got := hex.EncodeToString(m.Sum(nil)); got != lb.fx.md5 {
		b.Fatalf("hash pass: MD5 %s, want the file's %s", got, lb.fx.md5)
	}
	crc := upload.EncodeChecksum(c.Sum(nil))
	progress("large hash: %d bytes, %.2f CPU-s, CRC-64/NVME %s", lb.fx.size, cpu.Seconds(), crc)
	return cpu, crc
}

// floorPut is minio-go's multipart upload of the file straight to the store.
func (lb *largeBench) floorPut(b *testing.B, ctx context.Context, crc string) time.Duration {
	b.Helper()
	c, err := minio.New(lb.e.s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3Access, s3Secret, ""), Secure: true,
		Region: "us-east-1", TrailingHeaders: true,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: lb.e.roots}, DisableCompression: true}})
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(lb.fx.path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	key := "large-floor/" + lb.fx.rel
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout(lb.fx.size))
	defer cancel()
	start := time.Now()
	_, err = c.PutObject(ctx, s3Bucket, key, f, lb.fx.size, minio.PutObjectOptions{PartSize: uint64(lb.partSize),
		SendContentMd5: true, AutoChecksum: minio.ChecksumCRC64NVME, DisableContentSha256: true, ContentType: "application/octet-stream"})
	elapsed := time.Since(start)
	if err != nil {
		b.Fatalf("floor: minio-go multipart upload: %v", err)
	}
	progress("large floor: %d bytes in %.2fs (%.1f MiB/s)", lb.fx.size, elapsed.Seconds(), mibPerSec(lb.fx.size, elapsed))
	lb.checkAndEmpty(b, "floor", key, crc)
	return elapsed
}

// childPut is one upload of the file by the Uploader in a child process,
// with the endpoint in a server child.
type childPut struct {
	elapsed time.Duration
	cpCPU   time.Duration // the server child's CPU during the upload
	cpRead  int64         // the server child's rchar during the upload
	hwmKiB  int64         // the Uploader child's peak RSS
}

// sidecarPut sends the file with the Uploader in a child process to the
// endpoint in a server child: through it (proxy), or with direct uploads
// on (direct: the server child presigns the parts, the Uploader sends them
// straight to the store). The server child's rchar (/proc/<pid>/io: every
// byte its read(2) calls returned, its sockets included) says whether the
// body went through it: the proxied upload must read at least the file, the
// direct one less than one part.
func (lb *largeBench) sidecarPut(b *testing.B, crc string, direct bool) childPut {
	b.Helper()
	name, directMin := "proxy", "-1"
	if direct {
		name, directMin = "direct", "0" // 0: the Uploader's DirectMinSize default
	}
	cp := lb.startServer(b, direct)
	defer cp.stop()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	timeout := uploadTimeout(lb.fx.size)
	ctx, cancel := context.WithTimeout(b.Context(), timeout+10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"=upload",
		childEnv+"_URL="+cp.url, childEnv+"_JOB="+jobOf(name, 0), childEnv+"_TOKEN_FILE="+lb.tokenFile,
		childEnv+"_CA_FILE="+lb.e.caFile, childEnv+"_DIR="+lb.fx.dir, childEnv+"_REL="+lb.fx.rel,
		childEnv+"_SIZE="+strconv.FormatInt(lb.fx.size, 10), childEnv+"_MD5="+lb.fx.md5, childEnv+"_TIMEOUT="+timeout.String(),
		childEnv+"_DIRECT_MIN="+directMin, childEnv+"_RESUME_MIN="+strconv.FormatInt(lb.resumeMinSize(), 10))
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	pid := cp.cmd.Process.Pid
	ioFile := "/proc/" + strconv.Itoa(pid) + "/io"
	cp0, io0 := procCPU(pid), readProcIOFile(ioFile)
	err = cmd.Run()
	cpCPU, io1 := procCPU(pid)-cp0, readProcIOFile(ioFile)
	if err != nil {
		b.Fatalf("%s: sidecar child: %v\nstdout: %s\nstderr: %s", name, err, stdout.String(), stderr.String())
	}
	var rep childReport
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); err != nil {
		b.Fatalf("%s: sidecar child: %v in its output %q (stderr %q)", name, err, stdout.String(), stderr.String())
	}
	if rep.Err != "" {
		b.Fatalf("%s: sidecar child: %s", name, rep.Err)
	}
	if err := checkResult(rep.Result, lb.fx); err != nil {
		b.Fatalf("%s: sidecar child: %v", name, err)
	}
	if io0.rchar < 0 || io1.rchar < 0 {
		b.Fatalf("%s: cannot read %s (the server child's I/O counters): run the benchmark as the user that can read its children's /proc/<pid>/io", name, ioFile)
	}
	cpRead := io1.rchar - io0.rchar
	switch {
	case !direct && cpRead < lb.fx.size:
		b.Fatalf("proxy: the server child read %d bytes during the upload, less than the %d-byte file it carried: its rchar does not count the body", cpRead, lb.fx.size)
	case direct && cpRead >= lb.partSize:
		b.Fatalf("direct: the server child read %d bytes during the upload, a part (%d bytes) or more: the body went through the endpoint, not straight to the store", cpRead, lb.partSize)
	}
	progress("large %s: %d bytes in %.2fs (%.1f MiB/s), control plane CPU %.2fs, read %d bytes; sidecar peak RSS %d KiB",
		name, lb.fx.size, rep.Elapsed.Seconds(), mibPerSec(lb.fx.size, rep.Elapsed), cpCPU.Seconds(), cpRead, rep.HWM)
	lb.checkAndEmpty(b, name, jobOf(name, 0)+"/"+lb.fx.rel, crc)
	return childPut{elapsed: rep.Elapsed, cpCPU: cpCPU, cpRead: cpRead, hwmKiB: rep.HWM}
}

// resumePut cuts the Uploader's PUT after largeCutPercent of the file, then
// sends the file again with a new Uploader: where it resumed, and the cut.
func (lb *largeBench) resumePut(b *testing.B, ctx context.Context, crc string) (resumed, cutPoint int64) {
	b.Helper()
	cp := lb.startServer(b, false)
	defer cp.stop()
	cutPoint = lb.fx.size * largeCutPercent / 100
	cut := &largeCut{limit: cutPoint}
	root, err := os.OpenRoot(lb.fx.dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	newUploader := func() *artifacts.Uploader {
		up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: cp.url, JobID: jobOf("proxy", 0), TokenFile: lb.tokenFile,
			CAFile: lb.e.caFile, MaxAttempts: 1, PodUID: benchutil.BenchPodUID, DirectMinSize: -1, ResumeMinSize: lb.resumeMinSize(),
			WrapTransport: func(rt http.RoundTripper) http.RoundTripper { cut.next = rt; return cut }})
		if err != nil {
			b.Fatal(err)
		}
		return up
	}
	ctx, cancel := context.WithTimeout(ctx, 2*uploadTimeout(lb.fx.size))
	defer cancel()
	if _, err := newUploader().UploadFile(ctx, root, lb.fx.rel); err == nil {
		b.Fatal("resume: the PUT cut at 60% of the file was verified")
	}
	sent0 := cut.sent.Load()
	res, err := newUploader().UploadFile(ctx, root, lb.fx.rel)
	if err != nil {
		b.Fatalf("resume: the upload after the cut: %v", err)
	}
	if err := checkResult(res, lb.fx); err != nil {
		b.Fatalf("resume: %v", err)
	}
	// The PUT body is aws-chunked: its framing comes on top of the data.
	if sent := cut.sent.Load() - sent0; res.Resumed < 0 || res.Resumed > cutPoint || sent < lb.fx.size-res.Resumed {
		b.Fatalf("resume: resumed after %d bytes and sent %d; want at most the %d bytes sent before the cut skipped and the rest sent", res.Resumed, sent, cutPoint)
	}
	progress("large resume: cut at %d, resumed at %d: %d bytes sent again", cutPoint, res.Resumed, cutPoint-res.Resumed)
	lb.checkAndEmpty(b, "resume", jobOf("proxy", 0)+"/"+lb.fx.rel, crc)
	return res.Resumed, cutPoint
}

// resumeMinSize makes the Uploader ask where to resume every file the
// endpoint stores in parts.
func (lb *largeBench) resumeMinSize() int64 {
	return cmpOr(lb.threshold, artifacts.DefaultResumeMinSize)
}

// startServer starts a server child whose store is probed and stores
// bodies in parts from lb.threshold; direct: with direct uploads on.
func (lb *largeBench) startServer(b *testing.B, direct bool) *serverChild {
	b.Helper()
	return startServerChild(b, lb.e, direct, childEnv+"_MULTIPART=true",
		childEnv+"_MP_THRESHOLD="+strconv.FormatInt(lb.threshold, 10), childEnv+"_MP_PART="+strconv.FormatInt(lb.partBase, 10))
}

// checkAndEmpty checks that key holds the file stored in parts, then
// removes every object and open upload of the bucket.
func (lb *largeBench) checkAndEmpty(b *testing.B, name, key, crc string) {
	b.Helper()
	c, err := lb.e.s3Client()
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	opts := minio.StatObjectOptions{Checksum: true}
	info, err := c.StatObject(ctx, s3Bucket, key, opts)
	if err != nil {
		b.Fatalf("%s: %s: %v", name, key, err)
	}
	if info.Size != lb.fx.size || info.ChecksumCRC64NVME != crc {
		b.Fatalf("%s: %s stored %d bytes, CRC-64/NVME %q; want %d bytes, CRC-64/NVME %s",
			name, key, info.Size, info.ChecksumCRC64NVME, lb.fx.size, crc)
	}
	// Stored in parts: part 1 is the endpoint's part size.
	part1, err := c.StatObject(ctx, s3Bucket, key, minio.StatObjectOptions{PartNumber: 1})
	if err != nil {
		b.Fatalf("%s: %s part 1: %v", name, key, err)
	}
	if part1.Size != lb.partSize {
		b.Fatalf("%s: %s: its part 1 is %d bytes (ETag %s); want it stored in parts of %d", name, key, part1.Size, info.ETag, lb.partSize)
	}
	for oi := range c.ListObjects(ctx, s3Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if oi.Err != nil {
			b.Fatal(oi.Err)
		}
		if err := c.RemoveObject(ctx, s3Bucket, oi.Key, minio.RemoveObjectOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for u := range c.ListIncompleteUploads(ctx, s3Bucket, "", true) {
		if u.Err != nil {
			b.Fatal(u.Err)
		}
		if err := c.RemoveIncompleteUpload(ctx, s3Bucket, u.Key); err != nil {
			b.Fatal(err)
		}
	}
}

// largeCut ends the first PUT body after limit bytes (a sidecar killed
// mid-file, a connection lost) and counts every PUT body byte.
type largeCut struct {
	next  http.RoundTripper
	limit int64
	cut   atomic.Bool
	sent  atomic.Int64
}

func (c *largeCut) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.Body != nil {
		var body io.Reader = r.Body
		if c.cut.CompareAndSwap(false, true) {
			body = io.MultiReader(io.LimitReader(r.Body, c.limit), errReader{})
		}
		r.Body = io.NopCloser(&sentCounter{r: body, n: &c.sent})
	}
	return c.next.RoundTrip(r)
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection cut by the benchmark") }

type sentCounter struct {
	r io.Reader
	n *atomic.Int64
}

func (s *sentCounter) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n.Add(int64(n))
	return n, err
}

// diskPeak is the most bytes a directory tree held, sampled every 100 ms.
type diskPeak struct {
	peak atomic.Int64
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func watchDisk(dir string) *diskPeak {
	d := &diskPeak{done: make(chan struct{})}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			var n int64
			_ = filepath.WalkDir(dir, func(_ string, de fs.DirEntry, err error) error {
				if err == nil && !de.IsDir() {
					if fi, err := de.Info(); err == nil {
						n += fi.Size()
					}
				}
				return nil
			})
			if n > d.peak.Load() {
				d.peak.Store(n)
			}
			select {
			case <-d.done:
				return
			case <-t.C:
			}
		}
	}()
	return d
}

func (d *diskPeak) stop() {
	d.once.Do(func() { close(d.done) })
	d.wg.Wait()
}
