package upload_test

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/benchutil"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// BenchmarkManifestFlood: one tenant's 50 jobs each send a manifest of the
// maximum size (16 MiB, 100,000 entries, none stored) at once, retrying
// after Retry-After when refused, as a sidecar does; meanwhile a second
// tenant's job sends its honest manifest (1,000 files, all stored). The
// artifact endpoint runs in a child process (the manifest server of
// BenchmarkManifestPutRSS: endpoint.Handler on the fs backend, TLS) whose
// Go memory limit is the chart's (GOMEMLIMIT: controlplane.MemoryLimitRatio
// of limits.memory in charts/tether/values.yaml).
//
// Reported: manifest-flood-peak-rss-x-limit (the child's peak RSS, VmHWM,
// over the chart's limits.memory; bar <= 0.75),
// manifest-flood-honest-x-alone (the honest manifest PUT's median time
// during the flood over its median time alone, both of five PUTs in this
// run; bar <= 2), and how the flood went: flood-ok, flood-refused (503s
// with Retry-After before a 200), flood-s, honest-alone-ms, honest-flood-ms.
func BenchmarkManifestFlood(b *testing.B) {
	// At smoke size, 3 jobs' manifests of 1,000 entries against an honest
	// one of 20 files, two PUTs of it alone and two during the flood.
	floodJobs, honestFiles, honestRounds := benchutil.Size(b, 50, 3), benchutil.Size(b, 1000, 20), benchutil.Size(b, 5, 2)
	floodEntries := benchutil.Size(b, upload.MaxManifestEntries, smokeManifestEntries)
	limit := chartMemoryLimit(b)
	goLimit := int64(float64(limit) * controlplane.MemoryLimitRatio)
	var jobs []benchJob
	for i := range floodJobs {
		id := fmt.Sprintf("flood-%02d", i)
		jobs = append(jobs, benchJob{Token: fmt.Sprintf("%064x", 0xf100+i),
			Job: endpoint.Job{Namespace: "tenant-flood", Name: id, JobID: id, Writable: true, Pods: map[int]string{0: id + "-pod"}}})
	}
	honest := benchJob{Token: fmt.Sprintf("%064x", 0x40e57),
		Job: endpoint.Job{Namespace: "tenant-honest", Name: "honest", JobID: "honest", Writable: true, Pods: map[int]string{0: "honest-pod"}}}
	srv := startManifestServer(b, "GOMEMLIMIT="+strconv.FormatInt(goLimit, 10), manifestJobsEnv(b, append(slices.Clone(jobs), honest)))

	bodies := make([][]byte, floodJobs)
	for i, j := range jobs {
		bodies[i] = bigManifestOf(b, floodEntries, j.Job.JobID, j.Job.Pods[0])
	}
	m := upload.Manifest{Version: upload.ManifestVersion, JobID: honest.Job.JobID, PodUID: honest.Job.Pods[0]}
	for i := range honestFiles {
		data := fmt.Appendf(nil, "honest file %d", i)
		p := fmt.Sprintf("ckpt/file-%04d.bin", i)
		if resp, err := srv.putAs(b, honest, p, data); err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("storing the honest job's %s: %v %v", p, resp, err)
		}
		sum := md5.Sum(data)
		m.Files = append(m.Files, upload.ManifestFile{Path: p, Size: int64(len(data)), MD5: hex.EncodeToString(sum[:])})
	}
	honestBody, err := json.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	honestPut := func() time.Duration {
		start := time.Now()
		resp, err := srv.putAs(b, honest, upload.ManifestName, honestBody)
		d := time.Since(start)
		if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get(names.HeaderManifestVerified) != "true" {
			b.Fatalf("the honest manifest: %v %v", resp, err)
		}
		return d
	}
	for b.Loop() {
		psiBefore := cpuPressure()
		honestPut() // warm: the connection, the store's directories
		var alone []time.Duration
		for range honestRounds {
			alone = append(alone, honestPut())
		}
		baseline := srv.statusKiB(b, "VmRSS")

		var ok, refused, failed atomic.Int64
		var floodDone sync.WaitGroup
		start := time.Now()
		for i, j := range jobs {
			floodDone.Go(func() {
				for attempt := 0; attempt < 1000; attempt++ {
					resp, err := srv.putAs(b, j, upload.ManifestName, bodies[i])
					switch {
					case err == nil && resp.StatusCode == http.StatusOK:
						ok.Add(1)
						return
					case err == nil && resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
						refused.Add(1)
						s, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
						time.Sleep(time.Duration(max(s, 1)) * time.Second)
					case err == nil:
						// A wrong answer, not a refusal for the moment:
						// retrying would only take the run's time.
						b.Errorf("flood job %s: manifest PUT answered %d", j.Job.JobID, resp.StatusCode)
						return
					default:
						// Refused before the body was sent whole: the
						// connection was closed under it.
						failed.Add(1)
						time.Sleep(time.Second)
					}
				}
			})
		}
		// The flood's first bodies are on their way (16 MiB over loopback
		// TLS each): the honest manifest then goes in its midst, a few
		// times over a few seconds (admissions, retries after Retry-After).
		time.Sleep(time.Second)
		var during []time.Duration
		for range honestRounds {
			during = append(during, honestPut())
			time.Sleep(300 * time.Millisecond)
		}
		honestEnd := time.Since(start)
		floodDone.Wait()
		flood := time.Since(start)
		peak := srv.statusKiB(b, "VmHWM")
		psiAfter := cpuPressure()

		fmt.Fprintf(os.Stderr, "manifest-flood: %d jobs' %.1f MiB manifests, Go limit %.1f MiB: %d ok, %d refused with Retry-After, %d cut off, in %s (honest PUTs done at %s); "+
			"server RSS %.1f MiB before, peak %.1f MiB (%.2f of %.0f MiB); honest manifest alone %v, during the flood %v; cpu pressure avg10 %s before, %s after\n",
			floodJobs, float64(len(bodies[0]))/(1<<20), float64(goLimit)/(1<<20), ok.Load(), refused.Load(), failed.Load(), flood.Round(time.Millisecond), honestEnd.Round(time.Millisecond),
			float64(baseline)/1024, float64(peak)/1024, float64(peak)*1024/float64(limit), float64(limit)/(1<<20), alone, during, psiBefore, psiAfter)
		b.ReportMetric(float64(peak)*1024/float64(limit), "manifest-flood-peak-rss-x-limit")
		b.ReportMetric(float64(median(during))/float64(median(alone)), "manifest-flood-honest-x-alone")
		b.ReportMetric(float64(ok.Load()), "flood-ok")
		b.ReportMetric(float64(refused.Load()+failed.Load()), "flood-refused")
		b.ReportMetric(flood.Seconds(), "flood-s")
		b.ReportMetric(float64(median(alone).Microseconds())/1000, "honest-alone-ms")
		b.ReportMetric(float64(median(during).Microseconds())/1000, "honest-flood-ms")
	}
}

// chartMemoryLimit is the control plane's limits.memory in the chart.
func chartMemoryLimit(b *testing.B) int64 {
	b.Helper()
	limit, err := testenv.ChartMemoryLimit()
	if err != nil {
		b.Fatal(err)
	}
	return limit
}

// cpuPressure is the machine's CPU pressure, "some avg10", from
// /proc/pressure/cpu ("?" where it cannot be read).
func cpuPressure() string {
	raw, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return "?"
	}
	var avg10 string
	if _, err := fmt.Sscanf(string(raw), "some avg10=%s", &avg10); err != nil {
		return "?"
	}
	return avg10
}
