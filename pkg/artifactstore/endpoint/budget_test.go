package endpoint

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// testBudget is a budget of ratio of a Go memory limit the test sets.
func testBudget(ratio float64, limit int64) (*MemoryBudget, *atomic.Int64) {
	var l atomic.Int64
	l.Store(limit)
	b := NewMemoryBudget(ratio)
	b.memoryLimit = l.Load
	return b, &l
}

var maxCost = ManifestCost(upload.MaxManifestSize)

func TestManifestCost(t *testing.T) {
	if got, want := ManifestCost(0), int64(requestCost); got != want {
		t.Errorf("ManifestCost(0) = %d, want %d", got, want)
	}
	// The body, the decoder's value (3x at most MaxManifestValue), a
	// digest per entry the body could hold, the request's buffers.
	want := int64(upload.MaxManifestSize + 3*verify.MaxManifestValue + upload.MaxManifestEntries*entryCost + requestCost)
	if maxCost != want {
		t.Errorf("ManifestCost(16 MiB) = %d, want %d", maxCost, want)
	}
	if got := ManifestCost(5 << 30); got != maxCost {
		t.Errorf("ManifestCost of a Content-Length over the manifest cap = %d, want the cap's %d (a body is never held past it)", got, maxCost)
	}
	if got := ManifestCost(-1); got != requestCost {
		t.Errorf("ManifestCost(-1) = %d", got)
	}
	for n := int64(0); n < upload.MaxManifestSize; n += 1 << 20 {
		if ManifestCost(n) > ManifestCost(n+1<<20) {
			t.Fatalf("ManifestCost(%d) > ManifestCost(%d)", n, n+1<<20)
		}
	}
	t.Logf("a manifest of the maximum size reserves %.1f MiB", float64(maxCost)/(1<<20))
}

// TestMemoryBudgetShares: the bound is ratio of the Go memory limit (an
// assumed 1 GiB without one), followed as it changes; a namespace takes
// at most its share; each holds at least one manifest of the maximum size;
// what is released is given back once.
func TestMemoryBudgetShares(t *testing.T) {
	b, limit := testBudget(0.25, 1<<30)
	total, ns := b.Limits()
	if total != 256<<20 || ns != 32<<20 {
		t.Fatalf("Limits() = %d, %d, want 256 MiB and 32 MiB", total, ns)
	}
	var releases []func()
	take := func(ns string) *budgetRefusal {
		t.Helper()
		release, refused := b.reserve(ns, maxCost)
		if refused == nil {
			releases = append(releases, release)
		}
		return refused
	}
	// One manifest of the maximum size per namespace, ten in all.
	for i, ns := range strings.Split("abcdefghij", "") {
		if r := take(ns); r != nil {
			t.Fatalf("reservation %d (namespace %s): refused: %s", i, ns, r.message())
		}
	}
	if r := take("a"); r == nil || !r.ofNamespace || !strings.Contains(r.message(), "namespace a") {
		t.Errorf("a second of namespace a: %+v, want refused for its share", r)
	}
	if r := take("k"); r == nil || r.ofNamespace || strings.Contains(r.message(), "namespace") {
		t.Errorf("an eleventh: %+v, want refused for the bound, naming no namespace", r)
	}
	s := b.Stats()
	if s.Held != 10*maxCost || s.ByNamespace["a"] != maxCost || len(s.ByNamespace) != 10 || s.Refused != 1 || s.RefusedNamespace != 1 ||
		s.Limit != total || s.NamespaceLimit != ns {
		t.Errorf("Stats() = %+v", s)
	}
	releases[0]()
	releases[0]() // once only
	if s := b.Stats(); s.Held != 9*maxCost || s.ByNamespace["a"] != 0 || len(s.ByNamespace) != 9 {
		t.Errorf("after one release: %+v", s)
	}
	for _, r := range releases[1:] {
		r()
	}
	if s := b.Stats(); s.Held != 0 || len(s.ByNamespace) != 0 {
		t.Errorf("after every release: %+v", s)
	}

	// The bound follows the Go memory limit: a resized container.
	limit.Store(2 << 30)
	if total, ns := b.Limits(); total != 512<<20 || ns != 64<<20 {
		t.Errorf("after the limit doubled: %d, %d", total, ns)
	}
	// None set: an assumed 1 GiB.
	limit.Store(math.MaxInt64)
	if total, _ := b.Limits(); total != 256<<20 {
		t.Errorf("without a memory limit: %d, want 256 MiB", total)
	}
	// A small limit still reads one manifest of the maximum size.
	limit.Store(16 << 20)
	if total, ns := b.Limits(); total != maxCost || ns != maxCost {
		t.Errorf("a 16 MiB limit: %d, %d, want one manifest of the maximum size (%d) for both", total, ns, maxCost)
	}
	if r := take("a"); r != nil {
		t.Errorf("one manifest of the maximum size, nothing held: %s", r.message())
	}
	b.SetRatio(0.5)
	limit.Store(1 << 30)
	if total, _ := b.Limits(); total != 512<<20 {
		t.Errorf("ratio 0.5 of 1 GiB: %d", total)
	}
}

// TestMemoryBudgetConcurrent: reservations from many goroutines never
// hold more than the bound or a namespace more than its share, and all
// are given back.
func TestMemoryBudgetConcurrent(t *testing.T) {
	b, _ := testBudget(0.25, 1<<30)
	total, share := b.Limits()
	var wg sync.WaitGroup
	var over atomic.Bool
	for g := range 16 {
		ns := string(rune('a' + g%3))
		wg.Go(func() {
			for i := range 200 {
				release, refused := b.reserve(ns, ManifestCost(int64(i%17)<<20))
				if refused != nil {
					continue
				}
				if s := b.Stats(); s.Held > total || s.ByNamespace[ns] > share {
					over.Store(true)
				}
				release()
			}
		})
	}
	wg.Wait()
	if over.Load() {
		t.Error("the bound or a share was exceeded")
	}
	if s := b.Stats(); s.Held != 0 || len(s.ByNamespace) != 0 {
		t.Errorf("left held: %+v", s)
	}
}

// readFlag records whether a body was read.
type readFlag struct {
	r    io.Reader
	read atomic.Bool
}

func (f *readFlag) Read(p []byte) (int, error) {
	f.read.Store(true)
	return f.r.Read(p)
}

// TestManifestMemoryRefusesBeforeTheBody: while a manifest of the maximum
// size of namespace ml is read, its namespace's share is full: another
// job's manifest there is answered 503 SlowDown with Retry-After, saying
// what was refused and to retry, before its body is sent (Expect:
// 100-continue); another namespace's goes on; once the first is done the
// refused one goes through.
func TestManifestMemoryRefusesBeforeTheBody(t *testing.T) {
	// One namespace's share is one manifest of the maximum size, the
	// bound two.
	budget, _ := testBudget(0.25, 8*maxCost)
	saved := ManifestMemory
	ManifestMemory = budget
	t.Cleanup(func() { ManifestMemory = saved })
	const tokenC = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"
	testJobs[tokenC] = Job{Namespace: "other", Name: "job-c-wb", JobID: "job-c", Writable: true, Pods: map[int]string{0: testPod}}
	t.Cleanup(func() { delete(testJobs, tokenC) })
	var mu sync.Mutex
	var refusals []string
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()})
	e.h.OnRefused = func(reason string) {
		mu.Lock()
		defer mu.Unlock()
		refusals = append(refusals, reason)
	}

	// Job a's manifest declares the maximum size and sends a little.
	pr, pw := io.Pipe()
	held := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/tether-artifacts/job-a/manifest.json", pr)
		req.ContentLength = upload.MaxManifestSize
		req.Header.Set(names.HeaderArtifactToken, tokenA)
		req.Header.Set(names.HeaderArtifactPodUID, testPod)
		resp, err := (&http.Client{Transport: e.transport()}).Do(req)
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	go func() { _, _ = pw.Write([]byte(`{"version":"v1",`)) }()
	deadline := time.Now().Add(10 * time.Second)
	for budget.Stats().ByNamespace["ml"] != maxCost {
		if time.Now().After(deadline) {
			t.Fatalf("the held manifest reserved nothing: %+v", budget.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}

	body := manifestOf("job-b", 2)
	flag := &readFlag{r: bytes.NewReader(body)}
	resp := e.raw(http.MethodPut, "/tether-artifacts/job-b/manifest.json", tokenB, flag, int64(len(body)), http.Header{"Expect": {"100-continue"}})
	se := wantError(t, resp, http.StatusServiceUnavailable, "SlowDown")
	if ra := resp.Header.Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After %q, want 2", ra)
	}
	for _, want := range []string{"the manifest was not read", "namespace ml", "retry after Retry-After"} {
		if !strings.Contains(se.Message, want) {
			t.Errorf("message %q does not say %q", se.Message, want)
		}
	}
	if flag.read.Load() {
		t.Error("the refused manifest's body was sent")
	}
	mu.Lock()
	if len(refusals) != 1 || refusals[0] != "manifest_rate_limited" {
		t.Errorf("refusals counted %v, want one manifest_rate_limited", refusals)
	}
	mu.Unlock()
	if s := budget.Stats(); s.RefusedNamespace != 1 || s.Refused != 0 {
		t.Errorf("Stats() = %+v, want one namespace refusal", s)
	}
	other := manifestOf("job-c", 0)
	if resp := e.raw(http.MethodPut, "/tether-artifacts/job-c/manifest.json", tokenC, bytes.NewReader(other), int64(len(other)), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("another namespace's manifest: %d, want 200", resp.StatusCode)
	}

	// The held PUT ends (its client gives up): its reservation is given back.
	pw.CloseWithError(errors.New("client gone"))
	<-held
	deadline = time.Now().Add(10 * time.Second)
	for budget.Stats().Held != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("left held: %+v", budget.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if resp := e.raw(http.MethodPut, "/tether-artifacts/job-b/manifest.json", tokenB, bytes.NewReader(body), int64(len(body)), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("the refused manifest again: %d, want 200", resp.StatusCode)
	}
}
