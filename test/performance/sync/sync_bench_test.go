package sync_test

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/benchutil"
)

const mib = 1 << 20

// ---- configuration ----

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration such as 1.5s", name, v)
	}
	return d
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "sync-bench: "+format+"\n", args...)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1 // nearest rank
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *server) newUploader(b *testing.B, conns int) *artifacts.Uploader {
	b.Helper()
	u, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: s.url, JobID: s.jobID, TokenFile: s.tokenFile, CAFile: s.caFile, MaxConns: conns,
		PodUID: benchutil.BenchPodUID})
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// ---- 50 checkpoints: close to verified ----

// checkpointWriter writes checkpoint i: a new directory ckpt-<i>, one
// file in it written in 1 MiB blocks (each stamped with i and its offset,
// so no two checkpoints are alike) and closed. It returns the close time
// and the file's MD5.
type checkpointWriter struct {
	dir   string
	size  int64
	block []byte
}

func (w *checkpointWriter) write(i int) (rel string, closed time.Time, sum string, err error) {
	rel = fmt.Sprintf("ckpt-%03d/model.bin", i)
	if err := os.Mkdir(filepath.Join(w.dir, fmt.Sprintf("ckpt-%03d", i)), 0o755); err != nil {
		return "", time.Time{}, "", err
	}
	f, err := os.Create(filepath.Join(w.dir, filepath.FromSlash(rel)))
	if err != nil {
		return "", time.Time{}, "", err
	}
	h := md5.New()
	for off := int64(0); off < w.size; off += mib {
		binary.LittleEndian.PutUint64(w.block, uint64(i))
		binary.LittleEndian.PutUint64(w.block[8:], uint64(off))
		blk := w.block[:min(mib, w.size-off)]
		h.Write(blk)
		if _, err := f.Write(blk); err != nil {
			f.Close()
			return "", time.Time{}, "", err
		}
	}
	if err := f.Close(); err != nil {
		return "", time.Time{}, "", err
	}
	return rel, time.Now(), hex.EncodeToString(h.Sum(nil)), nil
}

type checkpointRun struct {
	latencies []time.Duration // close → the server answered its PUT 200
	files     []string        // relative paths, still on disk
	dir       string
}

// runCheckpoints runs the Syncer as cmd/sidecar configures it (fileEvents
// on or off, the default settle time and interval, the default workers;
// at smoke size a settle time and interval of a second),
// writes n checkpoints one after another, one every pace, and waits until
// the server verified each.
func runCheckpoints(b *testing.B, s *server, fileEvents bool, n int, size int64, pace time.Duration) checkpointRun {
	b.Helper()
	dir := b.TempDir()
	// Zero: the defaults (artifacts.DefaultSettleTime, DefaultSyncInterval).
	settle := benchutil.Size(b, 0, time.Second)
	sc, err := artifacts.NewScanner(artifacts.ScannerConfig{Dir: dir, Settle: settle})
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	up := s.newUploader(b, 0)
	sy, err := artifacts.NewSyncer(artifacts.SyncerConfig{Scanner: sc, Uploader: up, JobID: s.jobID, PodUID: benchutil.BenchPodUID, FileEvents: fileEvents,
		Interval: settle,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sy.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	time.Sleep(200 * time.Millisecond) // the first round (and the watch) in place
	mode := sy.Mode()
	if fileEvents && mode != artifacts.ModeEvents {
		b.Fatalf("file events asked, mode %q (see the warning above)", mode)
	}
	w := &checkpointWriter{dir: dir, size: size, block: make([]byte, mib)}
	for i := range w.block {
		w.block[i] = byte(mrand.Uint32())
	}
	run := checkpointRun{dir: dir}
	closed := make([]time.Time, n)
	sums := make([]string, n)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * pace)); d > 0 {
			time.Sleep(d)
		}
		rel, at, sum, err := w.write(i)
		if err != nil {
			b.Fatal(err)
		}
		run.files, closed[i], sums[i] = append(run.files, rel), at, sum
	}
	deadline := time.Now().Add(2*time.Minute + time.Duration(n)*time.Second)
	for i, rel := range run.files {
		for {
			at, ok := s.verified(s.key(rel))
			if ok {
				run.latencies = append(run.latencies, at.Sub(closed[i]))
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("mode %s: %s not verified by the server %s after its close", mode, rel, time.Since(closed[i]).Round(time.Millisecond))
			}
			time.Sleep(5 * time.Millisecond)
		}
		info, err := s.backend.Head(context.Background(), s.key(rel))
		if err != nil || info.ETag != sums[i] || info.Size != size {
			b.Fatalf("%s stored as %+v (%v), want size %d md5 %s", rel, info, err, size, sums[i])
		}
	}
	progress("mode %s: %d checkpoints of %d MiB, one every %s: close to verified p50 %s p99 %s max %s", mode, n, size/mib, pace,
		percentile(run.latencies, 0.5).Round(time.Millisecond), percentile(run.latencies, 0.99).Round(time.Millisecond),
		slices.Max(run.latencies).Round(time.Millisecond))
	return run
}

// uploadAlone uploads n checkpoints of size, written for it, one at a
// time, and returns how long each took.
func uploadAlone(b *testing.B, s *server, size int64, n int) []time.Duration {
	b.Helper()
	dir := b.TempDir()
	w := &checkpointWriter{dir: dir, size: size, block: make([]byte, mib)}
	root, err := os.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	up := s.newUploader(b, 0)
	var ds []time.Duration
	for i := range n {
		rel, _, _, err := w.write(1000 + i)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := up.UploadFile(context.Background(), root, rel); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		_ = s.backend.Delete(context.Background(), s.key(rel))
		s.forget(s.key(rel))
	}
	return ds
}

// BenchmarkCheckpointCloseToVerified: see doc.go.
func BenchmarkCheckpointCloseToVerified(b *testing.B) {
	n := envInt(b, "TETHER_BENCH_SYNC_CHECKPOINTS", benchutil.Size(b, 50, 3))
	size := int64(envInt(b, "TETHER_BENCH_SYNC_CHECKPOINT_MIB", benchutil.Size(b, 64, 4))) * mib
	pace := envDuration(b, "TETHER_BENCH_SYNC_PACE", benchutil.Size(b, 1500*time.Millisecond, 300*time.Millisecond))
	storeParent := os.Getenv("TETHER_BENCH_SYNC_STORE")
	progress("cpu pressure before: %s", benchutil.CPUPressure())
	for range b.N {
		s := startServer(b, storeParent)
		// One checkpoint's upload must fit between two closes, or the
		// figure measures a queue: the pace is at least twice the upload
		// time of three checkpoints uploaded alone first.
		warm := uploadAlone(b, s, size, 3)
		pace := max(pace, 2*percentile(warm, 0.5))
		progress("three uploads alone: p50 %s; one checkpoint every %s", percentile(warm, 0.5).Round(time.Millisecond), pace.Round(time.Millisecond))
		// Before: the settle rule alone (main: 10s unchanged, a round
		// every 10s).
		settle := runCheckpoints(b, s, false, n, size, pace)
		for _, rel := range settle.files {
			_ = s.backend.Delete(context.Background(), s.key(rel))
			s.forget(s.key(rel))
		}
		_ = os.RemoveAll(settle.dir)
		// After: upload on close.
		events := runCheckpoints(b, s, true, n, size, pace)
		// The file's own upload time: each checkpoint again, its object
		// deleted first, one UploadFile at a time (nothing else running).
		root, err := os.OpenRoot(events.dir)
		if err != nil {
			b.Fatal(err)
		}
		up := s.newUploader(b, 0)
		var uploads []time.Duration
		for _, rel := range events.files {
			if err := s.backend.Delete(context.Background(), s.key(rel)); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			res, err := up.UploadFile(context.Background(), root, rel)
			if err != nil {
				b.Fatal(err)
			}
			if res.How != artifacts.Uploaded {
				b.Fatalf("%s: %s, want uploaded", rel, res.How)
			}
			uploads = append(uploads, time.Since(t0))
		}
		root.Close()
		p50, p99, up50 := percentile(events.latencies, 0.5), percentile(events.latencies, 0.99), percentile(uploads, 0.5)
		progress("upload alone: p50 %s p99 %s; events p50 - upload p50 = %s (target <= 1s)", up50.Round(time.Millisecond),
			percentile(uploads, 0.99).Round(time.Millisecond), (p50 - up50).Round(time.Millisecond))
		b.ReportMetric(ms(p50), "close-to-verified-p50-ms")
		b.ReportMetric(ms(p99), "close-to-verified-p99-ms")
		b.ReportMetric(ms(up50), "upload-p50-ms")
		b.ReportMetric(ms(p50-up50), "over-upload-p50-ms")
		b.ReportMetric(ms(percentile(settle.latencies, 0.5)), "settle-close-to-verified-p50-ms")
		b.ReportMetric(ms(percentile(settle.latencies, 0.99)), "settle-close-to-verified-p99-ms")
		b.ReportMetric(float64(percentile(settle.latencies, 0.5))/float64(p50), "x-settle-p50")
		b.ReportMetric(pace.Seconds(), "pace-s")
	}
	progress("cpu pressure after: %s", benchutil.CPUPressure())
}

// ---- 10,000 small files ----

// smallFileCount is the small files' default count: 10,000, or 300 at
// smoke size.
func smallFileCount(b *testing.B) int { return benchutil.Size(b, 10000, 300) }

// smallFiles writes n files of 1-4 KiB under dir (100 per directory),
// last modified an hour ago (settled: the first round takes them all).
func smallFiles(b *testing.B, dir string, n int) {
	b.Helper()
	buf := make([]byte, 4<<10)
	old := time.Now().Add(-time.Hour)
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("shard-%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		for j := range buf {
			buf[j] = byte(mrand.Uint32())
		}
		p := filepath.Join(d, fmt.Sprintf("part-%05d.json", i))
		if err := os.WriteFile(p, buf[:1<<10+mrand.IntN(3<<10+1)], 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			b.Fatal(err)
		}
	}
}

type smallRun struct {
	perSecond       float64
	manifest, final time.Duration
}

// runSmall uploads the files in a round (FlushNow) with workers uploads at
// once and conns keep-alive connections, then the manifest alone
// (PutManifest), then the final flush (every file unchanged, the manifest).
func runSmall(b *testing.B, dir string, n, workers, conns int, storeParent string) smallRun {
	b.Helper()
	s := startServer(b, storeParent)
	sc, err := artifacts.NewScanner(artifacts.ScannerConfig{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Close()
	up := s.newUploader(b, conns)
	sy, err := artifacts.NewSyncer(artifacts.SyncerConfig{Scanner: sc, Uploader: up, JobID: s.jobID, PodUID: benchutil.BenchPodUID, Workers: workers})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now()
	rep, err := sy.FlushNow(ctx)
	took := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if rep.Uploaded != n || len(rep.Verified) != n || s.puts.Load() != int64(n) {
		b.Fatalf("uploaded %d, verified %d, server PUTs %d; want %d", rep.Uploaded, len(rep.Verified), s.puts.Load(), n)
	}
	r := smallRun{perSecond: float64(n) / took.Seconds()}
	m := artifacts.NewManifest(s.jobID, rep.Verified)
	m.PodUID = benchutil.BenchPodUID
	t0 = time.Now()
	if _, err := up.PutManifest(ctx, m); err != nil {
		b.Fatal(err)
	}
	r.manifest = time.Since(t0)
	t0 = time.Now()
	frep, err := sy.Flush(ctx)
	r.final = time.Since(t0)
	if err != nil || frep.Manifest == "" || len(frep.Verified) != n {
		b.Fatalf("final flush: %v, manifest %q, %d verified", err, frep.Manifest, len(frep.Verified))
	}
	progress("%d small files, %d workers, %d conns: %s (%.0f files/s); manifest %s; final flush %s", n, workers, conns,
		took.Round(time.Millisecond), r.perSecond, r.manifest.Round(time.Millisecond), r.final.Round(time.Millisecond))
	return r
}

// BenchmarkSmallFiles: see doc.go.
func BenchmarkSmallFiles(b *testing.B) {
	n := envInt(b, "TETHER_BENCH_SYNC_SMALL_FILES", smallFileCount(b))
	storeParent := os.Getenv("TETHER_BENCH_SYNC_STORE")
	dir := b.TempDir()
	smallFiles(b, dir, n)
	progress("cpu pressure before: %s", benchutil.CPUPressure())
	for range b.N {
		w := envInt(b, "TETHER_BENCH_SYNC_WORKERS", artifacts.DefaultWorkers)
		floor := fsFloor(b, dir, storeParent, w)
		before := runSmall(b, dir, n, 2, 4, storeParent) // main: 2 workers, 4 idle connections
		after := runSmall(b, dir, n, w, w, storeParent)  // the defaults
		b.ReportMetric(after.perSecond, "small-files-per-s")
		b.ReportMetric(before.perSecond, "baseline-small-files-per-s")
		b.ReportMetric(after.perSecond/before.perSecond, "x-small-files")
		b.ReportMetric(floor, "fs-floor-files-per-s")
		b.ReportMetric(after.perSecond/floor, "x-fs-floor")
		b.ReportMetric(ms(after.manifest), "manifest-10k-ms")
		b.ReportMetric(ms(after.final), "final-flush-10k-ms")
		// The same with the store in memory: what the sidecar and server
		// do when the disk's fsyncs are not the limit (they are on this
		// machine's disk, whose floor moved from 1,571 to 4,927 files/s
		// between runs).
		if storeParent == "" && isTmpfs("/dev/shm") {
			mem := runSmall(b, dir, n, w, w, "/dev/shm")
			b.ReportMetric(mem.perSecond, "tmpfs-small-files-per-s")
		}
	}
	progress("cpu pressure after: %s", benchutil.CPUPressure())
}

// ---- the sidecar process's memory ----

// BenchmarkSidecarSmallFilesRSS: see doc.go.
func BenchmarkSidecarSmallFilesRSS(b *testing.B) {
	n := envInt(b, "TETHER_BENCH_SYNC_SMALL_FILES", smallFileCount(b))
	bin := filepath.Join(b.TempDir(), "sidecar")
	goBin, err := exec.LookPath("go")
	if err != nil {
		b.Fatalf("building the sidecar needs the go command: %v", err)
	}
	build := exec.Command(goBin, "build", "-o", bin, "github.com/tether-dev/tether/cmd/sidecar")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the sidecar: %v\n%s", err, out)
	}
	for range b.N {
		s := startServer(b, os.Getenv("TETHER_BENCH_SYNC_STORE"))
		dir := b.TempDir()
		smallFiles(b, dir, n)
		// The store alone (no binding server) reviews no pod token; the
		// sidecar needs the file the webhook mounts.
		podToken := filepath.Join(b.TempDir(), "pod-token")
		if err := os.WriteFile(podToken, []byte("eyJhbGciOiJSUzI1NiJ9.e30.c2ln"), 0o600); err != nil {
			b.Fatal(err)
		}
		env := map[string]string{
			names.EnvPodTokenFile: podToken,
			names.EnvJobID:        s.jobID, names.EnvWorkerID: "worker-0", names.EnvTrainJob: "bench",
			names.EnvServerURL: s.url, names.EnvTokenFile: s.tokenFile, names.EnvCAFile: s.caFile,
			names.EnvArtifactDir: dir, names.EnvHeartbeatInterval: "10s",
			names.EnvPodName: "bench-node-0-0", names.EnvPodNamespace: "tether-bench", names.EnvPodUID: benchutil.BenchPodUID,
			names.EnvFlushBudget: "60s",
		}
		cmd := exec.Command(bin)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		complete := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			ok := false
			for sc.Scan() {
				line := sc.Text()
				if strings.Contains(line, "artifacts complete: every file verified, manifest uploaded") {
					ok = true
				}
				if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
					progress("sidecar: %s", line)
				}
			}
			complete <- ok
		}()
		var hwm int64
		readHWM := func() {
			if v := vmHWM(cmd.Process.Pid); v > hwm {
				hwm = v
			}
		}
		deadline := time.Now().Add(5 * time.Minute)
		for s.puts.Load() < int64(n) {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				b.Fatalf("the sidecar verified %d of %d files in 5 minutes", s.puts.Load(), n)
			}
			readHWM()
			time.Sleep(20 * time.Millisecond)
		}
		readHWM()
		took := time.Duration(s.lastPut.Load() - s.firstPut.Load())
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		func() {
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case err := <-exited:
					if err != nil {
						b.Fatalf("sidecar: %v", err)
					}
					return
				case <-t.C:
					readHWM()
				}
			}
		}()
		if !<-complete {
			b.Fatal("the sidecar's final flush did not verify every file and the manifest (see its log above)")
		}
		if _, err := s.backend.Head(context.Background(), s.key(upload.ManifestName)); err != nil {
			b.Fatalf("manifest: %v", err)
		}
		progress("sidecar process: %d small files, first to last PUT %s (%.0f files/s), peak RSS (VmHWM) %.1f MiB; register refused %d times",
			n, took.Round(time.Millisecond), float64(n-1)/took.Seconds(), float64(hwm)/mib, s.registerRefused.Load())
		b.ReportMetric(float64(hwm)/mib, "sidecar-rss-mib")
		b.ReportMetric(float64(n-1)/took.Seconds(), "sidecar-small-files-per-s")
	}
}

// vmHWM is a process's peak resident set (VmHWM), in bytes; 0 once it is gone.
func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
