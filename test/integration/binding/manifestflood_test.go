package binding

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// The share of a replica's Go memory limit one namespace's manifest checks
// may hold: an eighth (one namespace's part) of a quarter (all tenants'
// manifests).
const namespaceManifestShare = 0.25 * 0.125

// A tenant holding only its namespace's RBAC binds many TrainJobs and has
// each send a manifest of the maximum size (16 MiB, 100,000 entries) at
// once, every body held open before its last byte, against a replica whose
// Go memory limit is the chart's (90% of limits.memory, 1Gi). A manifest
// PUT is admitted when the server starts reading its body (it answers the
// request's "Expect: 100-continue"); the others must be answered 503
// SlowDown with Retry-After, unread. The admitted ones may hold no more
// than the namespace's share (1/32 of the limit: the bodies alone, 16 MiB
// each, count here), while another tenant's honest manifest is
// read and verified; the held ones then complete, and a refused one goes
// through when sent again.
func TestManifestFloodIsBoundedPerNamespace(t *testing.T) {
	goLimit := int64(float64(chartMemoryLimit(t)) * controlplane.MemoryLimitRatio)
	// The control plane runs in this process: its Go memory limit is the
	// process's, as GOMEMLIMIT sets it in the container.
	prev := debug.SetMemoryLimit(goLimit)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	share := int64(float64(goLimit) * namespaceManifestShare)

	const floodJobs = 10
	flooder, honestTenant := newTenant(t, "manifest-flood"), newTenant(t, "manifest-honest")
	var jobs []*tenantJob
	for i := range floodJobs {
		submit(t, flooder, fmt.Sprintf("flood-%d", i), "")
	}
	submit(t, honestTenant, "honest", "")
	for i := range floodJobs {
		jobs = append(jobs, registeredJob(t, flooder, fmt.Sprintf("flood-%d", i)))
	}
	honest := registeredJob(t, honestTenant, "honest")
	files := map[string][]byte{"model.bin": []byte("the honest weights"), "config.json": []byte(`{"lr":0.1}`)}
	for p, data := range files {
		honest.store(t, honest.jobID+"/"+p, data)
	}
	heldBefore := counter(t, `tether_artifacts_manifest_memory_refusals_total{scope="namespace"}`)

	// Every flood job's manifest at once, each held before its last byte.
	release := make(chan struct{})
	abort := make(chan struct{})
	var releaseOnce, abortOnce sync.Once
	t.Cleanup(func() { abortOnce.Do(func() { close(abort) }) })
	puts := make([]*heldPut, floodJobs)
	for i, j := range jobs {
		body, size := newFloodManifest(j, release, abort)
		puts[i] = startManifestPut(j, body, size)
	}
	var admitted, refused []int
	for i, p := range puts {
		if p.decided(t) {
			admitted = append(admitted, i)
		} else {
			refused = append(refused, i)
		}
	}
	bodies := int64(len(admitted)) * upload.MaxManifestSize
	t.Logf("%d maximum-size manifest PUTs of namespace %s at once: %d admitted (their bodies alone %.1f MiB), %d refused; the namespace's share is %.1f MiB (1/32 of the Go memory limit %.1f MiB)",
		floodJobs, flooder.Namespace, len(admitted), float64(bodies)/(1<<20), len(refused), float64(share)/(1<<20), float64(goLimit)/(1<<20))
	if len(admitted) == 0 {
		t.Fatalf("none of %d manifest PUTs of a namespace holding nothing was admitted", floodJobs)
	}
	if bodies > share {
		t.Fatalf("one namespace had %d of %d maximum-size manifest PUTs admitted at once: their bodies alone hold %.1f MiB of the replica, over the namespace's share of %.1f MiB",
			len(admitted), floodJobs, float64(bodies)/(1<<20), float64(share)/(1<<20))
	}
	for _, i := range refused {
		r := puts[i].result(t)
		if r.status != http.StatusServiceUnavailable || r.code != "SlowDown" || r.retryAfter == "" ||
			!strings.Contains(r.message, "was not read") || !strings.Contains(r.message, "retry") {
			t.Errorf("refused flood manifest %d: %d %s Retry-After %q %q, want 503 SlowDown with Retry-After saying it was not read and to retry",
				i, r.status, r.code, r.retryAfter, r.message)
		}
	}
	if len(refused) > 0 {
		r := puts[refused[0]].result(t)
		t.Logf("the flooding tenant sees: %d %s, Retry-After %s: %s", r.status, r.code, r.retryAfter, r.message)
	}

	// What the replica reports holding while the flood is held.
	nsHeld := counter(t, fmt.Sprintf(`tether_artifacts_manifest_memory_namespace_bytes{namespace=%q}`, flooder.Namespace))
	nsLimit := counter(t, `tether_artifacts_manifest_memory_limit_bytes{scope="namespace"}`)
	held, limit := counter(t, "tether_artifacts_manifest_memory_bytes"), counter(t, `tether_artifacts_manifest_memory_limit_bytes{scope="replica"}`)
	t.Logf("metrics: namespace %s holds %.1f MiB of its %.1f MiB; the replica %.1f MiB of %.1f MiB", flooder.Namespace, nsHeld/(1<<20), nsLimit/(1<<20), held/(1<<20), limit/(1<<20))
	if nsHeld < float64(bodies) || nsHeld > nsLimit || nsLimit > float64(share) || held > limit || held < nsHeld {
		t.Errorf("the metrics say namespace %s holds %v of its %v (share %d), the replica %v of %v: want the admitted bodies (%d) counted, within both",
			flooder.Namespace, nsHeld, nsLimit, share, held, limit, bodies)
	}
	if got := counter(t, `tether_artifacts_manifest_memory_refusals_total{scope="namespace"}`); got < heldBefore+float64(len(refused)) {
		t.Errorf("namespace refusals counted %v, want at least %v", got-heldBefore, len(refused))
	}

	// The other tenant's manifest is read and verified meanwhile.
	m := upload.Manifest{Version: upload.ManifestVersion, JobID: honest.jobID, PodUID: honest.podUID}
	for p, data := range files {
		sum := md5.Sum(data)
		m.Files = append(m.Files, upload.ManifestFile{Path: p, Size: int64(len(data)), MD5: hex.EncodeToString(sum[:])})
	}
	raw, _ := json.Marshal(m)
	hp := startManifestPut(honest, bytes.NewReader(raw), int64(len(raw)))
	if !hp.decided(t) {
		r := hp.result(t)
		t.Fatalf("another tenant's honest manifest during the flood: %d %s %q, want it read", r.status, r.code, r.message)
	}
	if r := hp.result(t); r.status != http.StatusOK || r.verified != "true" {
		t.Errorf("another tenant's honest manifest during the flood: %d %s %q, verified %q; want 200, verified", r.status, r.code, r.message, r.verified)
	}

	// The held manifests complete (their entries are not stored: not
	// verified), and their memory is given back.
	releaseOnce.Do(func() { close(release) })
	for _, i := range admitted {
		if r := puts[i].result(t); r.status != http.StatusOK || r.verified != "false" {
			t.Errorf("admitted flood manifest %d: %d %s %q, verified %q; want 200, not verified", i, r.status, r.code, r.message, r.verified)
		}
	}
	eventually(t, 20*time.Second, func() error {
		if n := counter(t, fmt.Sprintf(`tether_artifacts_manifest_memory_namespace_bytes{namespace=%q}`, flooder.Namespace)); n != 0 {
			return fmt.Errorf("namespace %s still holds %v bytes", flooder.Namespace, n)
		}
		return nil
	})
	// A refused one, sent again, goes through.
	if len(refused) > 0 {
		j := jobs[refused[0]]
		done := make(chan struct{})
		close(done)
		body, size := newFloodManifest(j, done, abort)
		again := startManifestPut(j, body, size)
		if !again.decided(t) {
			r := again.result(t)
			t.Fatalf("a refused flood manifest sent again with nothing held: %d %s %q", r.status, r.code, r.message)
		}
		if r := again.result(t); r.status != http.StatusOK {
			t.Errorf("a refused flood manifest sent again: %d %s %q, want 200", r.status, r.code, r.message)
		}
	}
	eventually(t, 20*time.Second, func() error {
		wb := &tetherv1.WorkerBinding{}
		if err := honestTenant.Client.Get(context.Background(), types.NamespacedName{Namespace: honestTenant.Namespace, Name: "honest"}, wb); err != nil {
			return err
		}
		if a := wb.Status.Artifacts; a == nil || !a.ManifestVerified {
			return fmt.Errorf("the honest manifest's verdict is not recorded verified: %+v", a)
		}
		return nil
	})
}

// chartMemoryLimit is the control plane's limits.memory in the chart.
func chartMemoryLimit(t *testing.T) int64 {
	t.Helper()
	limit, err := testenv.ChartMemoryLimit()
	if err != nil {
		t.Fatal(err)
	}
	return limit
}

// registeredJob is the tenant's bound TrainJob name whose node-0 pod's
// sidecar registered (a manifest is taken from a node's current registered
// pod only), once the replica takes that pod's writes.
func registeredJob(t *testing.T, tn *testenv.Tenant, name string) *tenantJob {
	t.Helper()
	ctx := context.Background()
	j := bound(t, tn, name)
	wb := &tetherv1.WorkerBinding{}
	if err := tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: name}, wb); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := tn.Client.List(ctx, &pods, client.InNamespace(tn.Namespace)); err != nil {
		t.Fatal(err)
	}
	var pod binding.PodIdentity
	for _, p := range pods.Items {
		if string(p.UID) == j.podUID {
			pod = binding.PodIdentity{Namespace: p.Namespace, Name: p.Name, UID: j.podUID}
		}
	}
	body, _ := json.Marshal(binding.RegisterRequest{JobID: j.jobID, WorkerID: wb.Spec.WorkerID, Pod: pod})
	eventually(t, 20*time.Second, func() error {
		req, err := http.NewRequest(http.MethodPost, env.BindingURL+binding.PathRegister, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set(binding.HeaderAuthorization, binding.Token(j.token).BearerHeader())
		req.Header.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(names.HeaderPodToken, j.podToken)
		resp, err := j.httpClient().Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("registering %s/%s: %d %s", tn.Namespace, name, resp.StatusCode, msg)
		}
		return nil
	})
	j.store(t, j.jobID+"/ready.txt", []byte("registered"))
	return j
}

// heldPut is a manifest PUT sent with "Expect: 100-continue": its body
// goes only once the server starts reading it, which is when it was
// admitted; a refused one is answered without it.
type heldPut struct {
	admitted chan struct{}
	done     chan struct{}
	res      putResult
}

type putResult struct {
	status                                   int
	code, message, retryAfter, verified, err string
}

func startManifestPut(j *tenantJob, body io.Reader, size int64) *heldPut {
	p := &heldPut{admitted: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	trace := &httptrace.ClientTrace{Got100Continue: func() { once.Do(func() { close(p.admitted) }) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPut,
		env.BindingURL+"/"+upload.Bucket+"/"+j.jobID+"/"+upload.ManifestName, body)
	if err != nil {
		p.res.err = err.Error()
		close(p.done)
		return p
	}
	req.ContentLength = size
	req.Header.Set(names.HeaderArtifactToken, j.token)
	req.Header.Set(names.HeaderArtifactPodUID, j.podUID)
	req.Header.Set(names.HeaderPodToken, j.podToken)
	req.Header.Set("Expect", "100-continue")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(j.ca)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ExpectContinueTimeout: 5 * time.Minute}}
	go func() {
		defer close(p.done)
		resp, err := hc.Do(req)
		if err != nil {
			p.res.err = err.Error()
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var e struct{ Code, Message string }
		_ = xml.Unmarshal(raw, &e)
		p.res = putResult{status: resp.StatusCode, code: e.Code, message: e.Message, retryAfter: resp.Header.Get("Retry-After"),
			verified: resp.Header.Get("X-Tether-Manifest-Verified")}
	}()
	return p
}

// decided waits until the PUT is admitted (true) or answered unread.
func (p *heldPut) decided(t *testing.T) bool {
	t.Helper()
	select {
	case <-p.admitted:
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("a manifest PUT was neither admitted nor answered")
	}
	// An admitted PUT is told to send its body before it is answered.
	select {
	case <-p.admitted:
		return true
	default:
		return false
	}
}

func (p *heldPut) result(t *testing.T) putResult {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("a manifest PUT was not answered")
	}
	if p.res.err != "" {
		t.Fatalf("manifest PUT: %s", p.res.err)
	}
	return p.res
}

// floodManifest is a job's manifest of upload.MaxManifestEntries entries,
// just under upload.MaxManifestSize, made as it is read (the test holds
// none of it); its last byte waits for release, and abort fails it.
type floodManifest struct {
	head           string
	n, pathLen     int
	next           int
	buf            []byte
	size, sent     int64
	release, abort <-chan struct{}
}

const floodEntry = `{"path":"","size":1,"md5":"00000000000000000000000000000000"}`

func newFloodManifest(j *tenantJob, release, abort <-chan struct{}) (*floodManifest, int64) {
	f := &floodManifest{head: fmt.Sprintf(`{"version":%q,"jobID":%q,"podUID":%q,"files":[`, upload.ManifestVersion, j.jobID, j.podUID),
		n: upload.MaxManifestEntries, release: release, abort: abort}
	f.pathLen = (upload.MaxManifestSize-len(f.head)-2-(f.n-1))/f.n - len(floodEntry)
	f.size = int64(len(f.head) + f.n*(len(floodEntry)+f.pathLen) + f.n - 1 + 2)
	return f, f.size
}

func (f *floodManifest) fill() {
	switch {
	case f.next == 0:
		f.buf = append(f.buf[:0], f.head...)
	case f.next < f.n:
		f.buf = append(f.buf[:0], ',')
	default:
		f.buf = append(f.buf[:0], "]}"...)
		f.next++
		return
	}
	f.buf = fmt.Appendf(f.buf, `{"path":"d%0*d","size":1,"md5":"%032x"}`, f.pathLen-1, f.next, f.next)
	f.next++
}

func (f *floodManifest) released() bool {
	select {
	case <-f.release:
		return true
	default:
		return false
	}
}

func (f *floodManifest) Read(p []byte) (int, error) {
	if f.sent == f.size {
		return 0, io.EOF
	}
	if f.sent == f.size-1 {
		select {
		case <-f.release:
		case <-f.abort:
			return 0, errors.New("the flood was called off")
		}
	}
	n := 0
	for n < len(p) && f.sent < f.size {
		if len(f.buf) == 0 {
			f.fill()
		}
		m := copy(p[n:], f.buf)
		if f.sent+int64(m) == f.size && !f.released() {
			m-- // the last byte waits
		}
		if m == 0 {
			break
		}
		f.buf, n, f.sent = f.buf[m:], n+m, f.sent+int64(m)
	}
	return n, nil
}
