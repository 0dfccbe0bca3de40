package upload_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/benchutil"
)

const (
	manifestServerMode = "manifest-server"
	manifestJobID      = "bench-manifest"
	// manifestPod is node 0's registered pod: every manifest names its pod.
	manifestPod   = "bench-manifest-pod-0"
	manifestToken = "00000000000000000000000000000000000000000000000000000000000000aa"
	// memoryLimitMiB is what a burst of manifests may take of the control
	// plane's memory: half the chart's limits.memory (1Gi), the other half
	// being the bindings' and sessions' at the documented scale.
	memoryLimitMiB = 512
	// smokeManifestEntries are a big manifest's entries at smoke size.
	smokeManifestEntries = 1000
	// maxPadPath bounds a padded manifest path: each is one file name in
	// the fs store (at most 255 bytes) and, with its job's prefix, a key
	// of at most upload.MaxKeyLength. Longer paths (1,000 bytes, as a
	// manifest of fewer entries than the cap once had) were answered 400,
	// so the benchmark measured a refusal.
	maxPadPath = 200
)

// BenchmarkManifestPutRSS sends ten manifest PUTs of 16 MiB at once, all
// with one token, to the artifact endpoint served by a child process (this
// test binary with TETHER_BENCH_UPLOAD_CHILD=manifest-server: endpoint.Handler
// with the fs backend and its production settings, TLS, the binding server's
// http.Server timeouts), and reports that process's peak RSS (VmHWM of
// /proc/<pid>/status) against 512 MiB, half the chart's 1Gi limit. The manifest lists
// TETHER_BENCH_MANIFEST_ENTRIES entries (default upload.MaxManifestEntries,
// the most the endpoint accepts), with paths as long as it takes to reach
// 16 MiB; none of them is stored, so each costs the endpoint its two HEADs.
//
// Reported: peak-rss-mib, baseline-rss-mib (after one small manifest PUT,
// before the ten), peak-of-limit (peak / 512 MiB; target < 0.6), ok (PUTs
// answered 200), refused-retry-after (429 or 503 with Retry-After) and
// other (anything else: a 400 for a manifest over the entry cap).
func BenchmarkManifestPutRSS(b *testing.B) {
	// At smoke size, 3 PUTs of 1,000 entries (about 1 MiB each).
	entries := benchutil.Size(b, upload.MaxManifestEntries, smokeManifestEntries)
	if s := os.Getenv("TETHER_BENCH_MANIFEST_ENTRIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("TETHER_BENCH_MANIFEST_ENTRIES=%q: want a positive count", s)
		}
		entries = n
	}
	parallel := benchutil.Size(b, 10, 3)
	body := bigManifest(b, entries)
	srv := startManifestServer(b)
	small := fmt.Appendf(nil, `{"version":%q,"jobID":%q,"podUID":%q,"files":[]}`, upload.ManifestVersion, manifestJobID, manifestPod)

	for b.Loop() {
		if code, _ := srv.put(b, small); code != http.StatusOK {
			b.Fatalf("warm-up manifest PUT: %d", code)
		}
		baseline := srv.statusKiB(b, "VmRSS")
		var mu sync.Mutex
		codes := map[string]int{}
		var wg sync.WaitGroup
		start := time.Now()
		for range parallel {
			wg.Go(func() {
				code, retryAfter := srv.put(b, body)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case code == http.StatusOK:
					codes["ok"]++
				case (code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable) && retryAfter != "":
					codes["refused-retry-after"]++
				default:
					codes[fmt.Sprintf("other-%d", code)]++
				}
			})
		}
		wg.Wait()
		if other := parallel - codes["ok"] - codes["refused-retry-after"]; other > 0 && entries <= upload.MaxManifestEntries {
			// A manifest within the cap is taken or refused for the
			// moment, nothing else: anything else is a wrong answer.
			b.Fatalf("%d of %d manifest PUTs answered neither 200 nor refused with Retry-After: %v", other, parallel, codes)
		}
		peak := srv.statusKiB(b, "VmHWM")
		fmt.Fprintf(os.Stderr, "manifest-bench: %d entries, %.1f MiB each, %d parallel PUTs of one token in %s: %v; server RSS %.1f MiB before, peak %.1f MiB (%.0f%% of %d MiB)\n",
			entries, float64(len(body))/(1<<20), parallel, time.Since(start).Round(time.Millisecond), codes,
			float64(baseline)/1024, float64(peak)/1024, 100*float64(peak)/1024/memoryLimitMiB, memoryLimitMiB)
		b.ReportMetric(float64(peak)/1024, "peak-rss-mib")
		b.ReportMetric(float64(baseline)/1024, "baseline-rss-mib")
		b.ReportMetric(float64(peak)/1024/memoryLimitMiB, "peak-of-limit")
		b.ReportMetric(float64(codes["ok"]), "ok")
		b.ReportMetric(float64(codes["refused-retry-after"]), "refused-retry-after")
		b.ReportMetric(float64(parallel-codes["ok"]-codes["refused-retry-after"]), "other")
	}
}

// bigManifest is a manifest of n entries, padded towards
// upload.MaxManifestSize with long paths (at most maxPadPath bytes each).
func bigManifest(b *testing.B, n int) []byte { return bigManifestOf(b, n, manifestJobID, manifestPod) }

// bigManifestOf is bigManifest of job jobID's node-0 pod pod.
func bigManifestOf(b *testing.B, n int, jobID, pod string) []byte {
	b.Helper()
	head := fmt.Sprintf(`{"version":%q,"jobID":%q,"podUID":%q,"files":[`, upload.ManifestVersion, jobID, pod)
	const perEntry = len(`{"path":"","size":1,"md5":"00000000000000000000000000000000"},`)
	pathLen := (upload.MaxManifestSize-len(head)-2)/n - perEntry
	if pathLen < 8 {
		b.Fatalf("%d entries do not fit in %d bytes with 8-character paths", n, upload.MaxManifestSize)
	}
	pathLen = min(pathLen, maxPadPath)
	var buf bytes.Buffer
	buf.Grow(upload.MaxManifestSize)
	buf.WriteString(head)
	for i := range n {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"path":"d%0*d","size":1,"md5":"%032x"}`, pathLen-1, i, i)
	}
	buf.WriteString("]}")
	if buf.Len() > upload.MaxManifestSize {
		b.Fatalf("manifest of %d bytes, over %d", buf.Len(), upload.MaxManifestSize)
	}
	return buf.Bytes()
}

type manifestServer struct {
	url string
	pid int
	hc  *http.Client
}

// startManifestServer starts the child with extraEnv (GOMEMLIMIT, the
// jobs it serves: manifestJobsEnv).
func startManifestServer(b *testing.B, extraEnv ...string) *manifestServer {
	b.Helper()
	dir := b.TempDir()
	certPEM, keyPEM := benchutil.SelfSignedCert(b)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	store := filepath.Join(dir, "store")
	if root := os.Getenv("TETHER_BENCH_UPLOAD_STORE"); root != "" {
		// e.g. /dev/shm: the disk's fsyncs out of the figures.
		d, err := os.MkdirTemp(root, "tether-manifest-store-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(d) })
		store = d
	}
	cmd.Env = append(os.Environ(), childEnv+"="+manifestServerMode, childEnv+"_CERT="+certFile, childEnv+"_KEY_FILE="+keyFile,
		childEnv+"_STORE="+store)
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
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		b.Fatalf("manifest server child: %q, %v", line, err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	return &manifestServer{url: "https://" + addr, pid: cmd.Process.Pid,
		hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, MaxIdleConnsPerHost: 64,
			ExpectContinueTimeout: 2 * time.Second}, Timeout: 5 * time.Minute}}
}

// put PUTs body as the job's manifest and returns the status and Retry-After.
func (s *manifestServer) put(b *testing.B, body []byte) (int, string) {
	resp, err := s.putAs(b, benchJob{Token: manifestToken, Job: endpoint.Job{JobID: manifestJobID, Pods: map[int]string{0: manifestPod}}}, upload.ManifestName, body)
	if err != nil {
		b.Error(err)
		return 0, ""
	}
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// putAs PUTs body at path of j's job with its token, naming its node-0
// pod (every write names its pod; a manifest must be that pod's), with
// "Expect: 100-continue" as the sidecar sends it (a refused PUT's body is
// then not sent), and returns the answer with its body read.
func (s *manifestServer) putAs(b *testing.B, j benchJob, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(b.Context(), http.MethodPut, s.url+"/"+upload.Bucket+"/"+j.Job.JobID+"/"+path, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set(names.HeaderArtifactToken, j.Token)
	req.Header.Set(names.HeaderArtifactPodUID, j.Job.Pods[0])
	req.Header.Set("Expect", "100-continue")
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp, nil
}

// benchJob is a binding the manifest server child holds: its token and
// the job it authorizes.
type benchJob struct {
	Token string
	Job   endpoint.Job
}

// manifestJobsEnv passes the child the jobs it serves (JSON), instead of
// the one job of BenchmarkManifestPutRSS.
func manifestJobsEnv(b *testing.B, jobs []benchJob) string {
	raw, err := json.Marshal(jobs)
	if err != nil {
		b.Fatal(err)
	}
	return childEnv + "_JOBS=" + string(raw)
}

// statusKiB reads a "kB" field of the child's /proc/<pid>/status.
func (s *manifestServer) statusKiB(b *testing.B, field string) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		b.Fatal(err)
	}
	for l := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("%s not in /proc/%d/status", field, s.pid)
	return 0
}

// runManifestServerChild serves the artifact endpoint for one writable job
// until its stdin closes.
func runManifestServerChild() int {
	env := func(k string) string { return os.Getenv(childEnv + "_" + k) }
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "manifest server child:", err); return 1 }
	cert, err := tls.LoadX509KeyPair(env("CERT"), env("KEY_FILE"))
	if err != nil {
		return fail(err)
	}
	backend, err := fsstore.NewFSBackend(env("STORE"))
	if err != nil {
		return fail(err)
	}
	defer backend.Close()
	jobs := map[string]endpoint.Job{manifestToken: {Namespace: "tether-bench", Name: manifestJobID, JobID: manifestJobID, Writable: true,
		Pods: map[int]string{0: manifestPod}}}
	if raw := env("JOBS"); raw != "" {
		var list []benchJob
		if err := json.Unmarshal([]byte(raw), &list); err != nil {
			return fail(err)
		}
		jobs = map[string]endpoint.Job{}
		for _, j := range list {
			jobs[j.Token] = j.Job
		}
	}
	h := &endpoint.Handler{
		Store: store.New(backend, store.Options{}),
		Authorize: func(_ context.Context, token binding.Token) (endpoint.Job, error) {
			j, ok := jobs[string(token)]
			if !ok {
				return endpoint.Job{}, endpoint.Unauthorized("no binding holds this token")
			}
			return j, nil
		},
		Log: logr.Discard(),
	}
	if err := serveChild(h, cert); err != nil {
		return fail(err)
	}
	return 0
}
