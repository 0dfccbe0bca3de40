package mutate

import (
	"bytes"
	"encoding/json"
	"net/http"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/test/framework/benchutil"
)

// BenchmarkPodReview is the in-process part of test/performance/admission's
// ratio: what PodHandler.ServeHTTP (the codec's fast path and the
// injection) costs per admission of a bound job's trainer pod
// (injected-default) against the bare floor's handler (benchutil.BareFloor,
// test/performance/admission's too: decode the AdmissionReview and its pod
// with encoding/json, answer allowed with no patch), both served here
// without TLS or HTTP/2 and measured in the same loop, interleaved.
// Allocations are what drives the GC work test/performance/admission sees at
// 1,000 rps; unlike time they are the same on a loaded machine.
//
// Reported: serve-cpu-ns/admission, bare-floor-cpu-ns/admission,
// x-bare-floor-cpu (their ratio), serve-allocs/admission, bare-floor-allocs/admission,
// serve-bytes/admission and bare-floor-bytes/admission.
func BenchmarkPodReview(b *testing.B) {
	pod := readJSON(b, "testdata/pod/injected-default.in.yaml")
	// A stored TrainJob, as the informer cache serves it: with a UID and a
	// resourceVersion.
	tj := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(readJSON(b, "testdata/pod/injected-default.trainjob.yaml"), tj); err != nil {
		b.Fatal(err)
	}
	tj.UID, tj.ResourceVersion = "8a6c1cf6-2f1b-4f43-9d1e-1f1c0b9b2f10", "4242"
	h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: oneTrainJob{tj}}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("705ab4f5-6393-11e8-b7cc-42010a800002"), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "ml-team",
			Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: pod},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	paths := []struct {
		name  string
		serve http.HandlerFunc
	}{{"serve", h.ServeHTTP}, {"bare-floor", benchutil.BareFloor}}
	for _, p := range paths {
		w := &discardResponse{keep: true}
		p.serve(w, reviewRequest(body))
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(w.body.Bytes(), &review); err != nil || review.Response == nil || !review.Response.Allowed {
			b.Fatalf("%s: not allowed: %v: %s", p.name, err, w.body.Bytes())
		}
		if p.name == "serve" && len(review.Response.Patch) == 0 {
			b.Fatalf("%s: no patch: %s", p.name, w.body.Bytes())
		}
	}

	// The time is this thread's CPU time, not the wall clock: on a shared
	// machine what other processes take from the core is not the handler's.
	// (The GC's background workers run on other threads and are not counted;
	// the allocations below stand for them.)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	took := make([]time.Duration, len(paths))
	n := 0
	for b.Loop() {
		// Alternate the order so neither path always runs first.
		for k := range paths {
			k = (k + n) % len(paths)
			req, w := reviewRequest(body), &discardResponse{}
			start := threadCPU(b)
			paths[k].serve(w, req)
			took[k] += threadCPU(b) - start
		}
		n++
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(n), "serve-cpu-ns/admission")
	b.ReportMetric(float64(took[1].Nanoseconds())/float64(n), "bare-floor-cpu-ns/admission")
	b.ReportMetric(float64(took[0])/float64(took[1]), "x-bare-floor-cpu")

	// Allocations per admission, each path alone, after the loop (b.Loop
	// drops metrics reported before it). runtime.MemStats counts every
	// goroutine's; nothing else runs here.
	const allocRuns = 200
	for _, p := range paths {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range allocRuns {
			p.serve(&discardResponse{}, reviewRequest(body))
		}
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.Mallocs-before.Mallocs)/allocRuns, p.name+"-allocs/admission")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/allocRuns, p.name+"-bytes/admission")
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

func reviewRequest(body []byte) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "/mutate-pod", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.ContentLength = int64(len(body))
	return r
}

// discardResponse is an http.ResponseWriter that discards the body, as a
// server's connection buffer would take it, or keeps it (keep) to check it.
type discardResponse struct {
	header http.Header
	keep   bool
	body   bytes.Buffer
}

func (w *discardResponse) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *discardResponse) Write(p []byte) (int, error) {
	if w.keep {
		return w.body.Write(p)
	}
	return len(p), nil
}

func (w *discardResponse) WriteHeader(int) {}
