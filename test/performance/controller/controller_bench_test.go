package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/benchutil"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

const (
	// stallTimeout fails a phase whose watches saw nothing new for that
	// long: a control plane that stops binding fails the run instead of
	// hanging it. A phase that progresses is bounded by phaseTimeout.
	stallTimeout = 2 * time.Minute
	floorLabel   = "bench.tether.dev/floor"
)

// phaseTimeout bounds a phase awaiting n objects: 6 minutes per 4,000 (a
// bind of 2,000 TrainJobs took 104 s on 2 saturated cores), so the growth
// to 10,000 bindings gets 24 minutes, within go test's -timeout 30m.
func phaseTimeout(n int) time.Duration {
	return max(6*time.Minute, time.Duration(n)*6*time.Minute/4000)
}

type benchConfig struct {
	jobs     int // TrainJobs created at once in the timed phase
	bindings int // bound TrainJobs when memory is read
	clients  int // client goroutines creating objects
	// apiserverProfileSeconds is how long kube-apiserver's CPU profile of
	// the bind lasts, from the Lease's release.
	apiserverProfileSeconds int
}

func loadConfig(b *testing.B) benchConfig {
	b.Helper()
	c := benchConfig{jobs: 2000, bindings: 10000, clients: 32, apiserverProfileSeconds: 12}
	if benchutil.Smoke(b) {
		// Every phase, the growth included, on a few dozen TrainJobs.
		c.jobs, c.bindings, c.clients = 40, 80, 8
	}
	for key, v := range map[string]*int{"TETHER_BENCH_JOBS": &c.jobs, "TETHER_BENCH_BINDINGS": &c.bindings, "TETHER_BENCH_CLIENTS": &c.clients,
		"TETHER_BENCH_APISERVER_CPUPROFILE_SECONDS": &c.apiserverProfileSeconds} {
		if s := os.Getenv(key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 || n > 100000 {
				b.Fatalf("%s=%q: want a positive integer up to 100000", key, s)
			}
			*v = n
		}
	}
	if c.bindings < c.jobs {
		b.Fatalf("TETHER_BENCH_BINDINGS=%d: want at least TETHER_BENCH_JOBS=%d", c.bindings, c.jobs)
	}
	return c
}

// BenchmarkBindAtScale: see doc.go. One b.N iteration is the floor and the
// timed phase in a namespace of their own; memory is read once, after the
// last iteration, with the bindings grown to TETHER_BENCH_BINDINGS.
func BenchmarkBindAtScale(b *testing.B) {
	cfg := loadConfig(b)
	// The control plane's production logger (cmd/tether-control-plane: zap,
	// JSON, info), writing nowhere: its log calls cost what they cost in
	// production.
	logf.SetLogger(controlplane.LazyValues(zap.New(zap.WriteTo(io.Discard))))
	ctx := b.Context()
	env, election := startEnv(b, ctx)
	// The benchmark's own client: no client-side rate limit (the control
	// plane runs with none either, controlplane.ClientSettings).
	cl, err := client.NewWithWatch(controlplane.ClientSettings(env.Config), client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	heap0 := heapInUse()
	b.Logf("control plane up and idle, not elected yet: heap in use %.1f MiB; %d client goroutines; CPU pressure %s", mib(heap0), cfg.clients, benchutil.CPUPressure())

	const ns = "bench"
	var floor, trainJobs, labeled, bind, bindStatus, electedAfter time.Duration
	var floorCPU, trainJobsCPU, labeledCPU, bindCPU, tokensCPU cpuUse
	var bindTotal float64
	var writes []bindingWrite
	var boundEvents int
	for b.Loop() {
		if election.released {
			// The bind is measured from the control plane's election, which
			// happens once per process.
			b.Fatal("run with -benchtime 1x: the bind phase needs a control plane that was never elected")
		}
		createNamespace(b, ctx, cl, ns)
		req0, cpu0 := readAPIRequests(b, ctx, env.Config), readCPU(b)
		floor = floorPhase(b, ctx, cl, ns, 2*cfg.jobs, cfg.clients)
		cpuF, reqF := readCPU(b), readAPIRequests(b, ctx, env.Config)
		writes = bindingWrites(b, ctx, cl, env.Config, env.Webhook.LocalServingCAData, cfg.jobs, cfg.clients)
		cpuW := readCPU(b)
		trainJobs = trainJobPhase(b, ctx, cl, ns, cfg.jobs, cfg.clients)
		cpuT := readCPU(b)
		labeled = labeledPhase(b, ctx, cl, ns, cfg.jobs, cfg.clients)
		cpu1, req1 := readCPU(b), readAPIRequests(b, ctx, env.Config)
		floorCPU, trainJobsCPU, labeledCPU = cpuF.sub(cpu0), cpuT.sub(cpuW), cpu1.sub(cpuT)
		// 12 s by default: a bind of 2,000 took 13 to 16 s here; the
		// tokens alone (with the election) 9 to 10.
		profiled := profileAPIServer(b, ctx, env.Config, os.Getenv("TETHER_BENCH_APISERVER_CPUPROFILE"), cfg.apiserverProfileSeconds)
		seen := watchBindings(b, ctx, cl, ns, 0, cfg.jobs)
		selfProfiled := profileSelf(b, os.Getenv("TETHER_BENCH_CPUPROFILE"))
		sampled := sampleCPU(b, 100*time.Millisecond)
		released := election.release(b, ctx)
		elected := election.awaitElected(b, ctx)
		at := seen(elected)
		bind, bindStatus, electedAfter = max(at[bindingKind], at[secretKind]), at[bindingKind+"/status"], elected.Sub(released)
		// The Bound Events may come after the first statuses: the bind's
		// CPU is read once they are in, as the binding writes' CPU it is
		// compared with includes theirs.
		boundEvents = countBoundEvents(b, ctx, cl, ns, cfg.jobs)
		samples := sampled()
		selfProfiled()
		profiled()
		bindCPU = readCPU(b).sub(cpu1)
		tokensCPU = cpuAt(samples, elected.Add(bind)).use.sub(cpu1)
		req2 := readAPIRequests(b, ctx, env.Config)
		floorReqs, floorTotal := reqF.per(req0, 2*cfg.jobs)
		var bindReqs []string
		bindReqs, bindTotal = req2.per(req1, cfg.jobs)
		b.Logf("kube-apiserver requests per plain object in the floor: %.2f (%s)", floorTotal, strings.Join(floorReqs, ", "))
		b.Logf("kube-apiserver requests per TrainJob bound: %.2f (%s)", bindTotal, strings.Join(bindReqs, ", "))
	}
	b.StopTimer()
	b.Logf("floor: %d plain objects in %s (CPU: %s); bind: %d TrainJobs bound (WorkerBinding and token Secret each) in %s from the election, %s after the benchmark released it (CPU: %s); CPU pressure %s",
		2*cfg.jobs, floor.Round(time.Millisecond), floorCPU, cfg.jobs, bind.Round(time.Millisecond), electedAfter.Round(time.Millisecond), bindCPU, benchutil.CPUPressure())
	b.Logf("until the last token was seen (%s from the election): CPU %s", bind.Round(time.Millisecond), tokensCPU)
	b.Logf("%d TrainJobs created unlabeled in %s (CPU: %s), labeled in %s (CPU: %s)", cfg.jobs,
		trainJobs.Round(time.Millisecond), trainJobsCPU, labeled.Round(time.Millisecond), labeledCPU)
	verify(b, ctx, cl, ns, cfg.jobs)
	matchesBind(b, ctx, cl, ns, env.Webhook.LocalServingCAData)
	logControllerStats(b)
	b.ReportMetric(floor.Seconds(), "floor-4000-s")
	b.ReportMetric(bind.Seconds(), "bind-2000-s")
	// The bind's time against the benchmark's own clients creating just
	// the same token Secrets and WorkerBindings (bindingWrites): what the
	// controller adds. Those writes against the floor are what a CRD and
	// a token Secret cost the API server against plain objects, whatever
	// controller makes them; the bind against the floor is the product of
	// the two, not reported (see doc.go).
	b.ReportMetric(tokenWritesTook(writes).Seconds()/floor.Seconds(), "token-writes-x-floor")
	b.ReportMetric(bind.Seconds()/tokenWritesTook(writes).Seconds(), "bind-x-token-writes")
	// The API server's and the control plane's CPU until the last token
	// was seen (sampled every 100 ms), against the floor's.
	b.ReportMetric(tokensCPU.children.Seconds()/floorCPU.children.Seconds(), "bind-tokens-x-floor-apiserver-cpu")
	b.ReportMetric(tokensCPU.self.Seconds()/floorCPU.self.Seconds(), "bind-tokens-x-floor-cp-cpu")
	// The first statuses may come after the tokens.
	b.ReportMetric(bindStatus.Seconds(), "bind-status-2000-s")
	b.ReportMetric(float64(bindCPU.self.Milliseconds())/float64(cfg.jobs), "cp-cpu-ms-per-bind")
	// What the binding's writes cost the API server by themselves, made by
	// the benchmark (see bindingWrites), and the bind against them: the
	// controller's own share of the API server's work (CPU time, steadier
	// than wall time on a shared machine).
	writesCPU := reportBindingWrites(b, writes, floorCPU, cfg.jobs)
	b.ReportMetric(bindCPU.children.Seconds()/writesCPU.Seconds(), "bind-x-binding-writes-apiserver-cpu")
	// The TrainJobs' own creation, which the floor does not pay: unlabeled
	// (no webhook, no binding), and labeled (through Tether's TrainJob
	// webhook, not bound yet): the webhook's path is the difference.
	b.ReportMetric(trainJobs.Seconds(), "trainjobs-2000-s")
	b.ReportMetric(trainJobsCPU.children.Seconds()/floorCPU.children.Seconds(), "trainjobs-2000-x-floor-apiserver-cpu")
	b.ReportMetric(labeled.Seconds(), "labeled-trainjobs-2000-s")
	b.ReportMetric(labeledCPU.children.Seconds()/trainJobsCPU.children.Seconds(), "labeled-x-unlabeled-apiserver-cpu")
	// Every kube-apiserver request of the bind phase per TrainJob (the
	// TrainJobs exist already: their creates are not in it).
	b.ReportMetric(bindTotal, "bind-apiserver-requests-per-job")
	// Events are sent beside the bind, from pkg/controlplane's
	// queuedEventSink's workers (client-go's broadcaster alone, one create
	// at a time, dropped what arrived past its 1,000 waiting): how many of
	// the burst's TrainJobs got their Bound Event.
	b.ReportMetric(float64(boundEvents)/float64(cfg.jobs), "bound-events-per-job")

	if cfg.bindings > cfg.jobs {
		cpu0, req0 := readCPU(b), readAPIRequests(b, ctx, env.Config)
		grow := bindPhase(b, ctx, cl, ns, cfg.jobs, cfg.bindings-cfg.jobs, cfg.clients)
		growCPU := readCPU(b).sub(cpu0)
		growReqs, growTotal := readAPIRequests(b, ctx, env.Config).per(req0, cfg.bindings-cfg.jobs)
		b.Logf("kube-apiserver requests per TrainJob created and bound in the growth: %.2f (%s)", growTotal, strings.Join(growReqs, ", "))
		b.Logf("grown to %d bindings in %s more (CPU: %s); CPU pressure %s", cfg.bindings, grow.Round(time.Millisecond), growCPU, benchutil.CPUPressure())
		logControllerStats(b)
		b.ReportMetric(grow.Seconds(), "grow-10k-s")
		b.ReportMetric(growCPU.children.Seconds()*1000/float64(cfg.bindings-cfg.jobs), "grow-apiserver-cpu-ms-per-bind")
		// The growth creates each TrainJob and binds it at once, as a sweep
		// does: its API-server CPU per job against the floor's per pair of
		// plain objects (the bindings already there are reconciled meanwhile).
		b.ReportMetric(growCPU.children.Seconds()/float64(cfg.bindings-cfg.jobs)/(floorCPU.children.Seconds()/float64(cfg.jobs)), "create-and-bind-x-floor-apiserver-cpu")
		verify(b, ctx, cl, ns, cfg.bindings)
	}
	total := cfg.bindings
	heap := heapInUse()
	rss := rssMiB(b)
	b.ReportMetric(mib(heap), "cp-mib-10k-bindings")
	b.ReportMetric(float64(heap-heap0)/1024/float64(total), "cp-heap-kib-per-binding")
	b.ReportMetric(rss, "rss-mib-10k-bindings")
	b.Logf("with %d bindings: heap in use after GC %.1f MiB (idle %.1f MiB), VmRSS %.1f MiB; CPU pressure %s", total, mib(heap), mib(heap0), rss, benchutil.CPUPressure())
	if path := os.Getenv("TETHER_BENCH_HEAPPROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
}

// countBoundEvents waits until ns holds want Bound Events, or until they
// stop growing short of it (none new for 3 s), and returns how many there
// are.
func countBoundEvents(b *testing.B, ctx context.Context, cl client.Client, ns string, want int) int {
	b.Helper()
	last, since, deadline := -1, time.Now(), time.Now().Add(stallTimeout)
	for time.Now().Before(deadline) {
		var list corev1.EventList
		if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, e := range list.Items {
			if e.Reason == lifecycle.ReasonBound && e.InvolvedObject.Kind == "TrainJob" {
				n++
			}
		}
		if n >= want {
			return n
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= 3*time.Second {
			return n
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.Fatalf("the Bound Events in %s were still growing after %s (%d so far)", ns, stallTimeout, last)
	return 0
}

// writeHeapProfile writes the heap profile as of now, with every binding
// cached (go test's -memprofile is written after the control plane stopped).
func writeHeapProfile(b *testing.B, path string) {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal("TETHER_BENCH_HEAPPROFILE:", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal("writing the heap profile:", err)
	}
}

// cpuUse is CPU time used so far: this process's (the control plane and the
// benchmark's client) and its children's (kube-apiserver and etcd), so a
// phase's cost can be told apart from the API server's.
type cpuUse struct{ self, children time.Duration }

func (c cpuUse) sub(o cpuUse) cpuUse { return cpuUse{c.self - o.self, c.children - o.children} }

func (c cpuUse) String() string {
	return fmt.Sprintf("control plane %.1f s, kube-apiserver+etcd %.1f s", c.self.Seconds(), c.children.Seconds())
}

// readCPU reads this process's CPU time and that of its children
// (kube-apiserver and etcd, started with the environment and found once:
// a scan of every /proc entry per read cost this process a sixth of its
// CPU when sampled every 100 ms) from /proc (utime+stime, in clock ticks
// of 1/100 s as on every Linux the benchmark runs on).
func readCPU(b *testing.B) cpuUse {
	b.Helper()
	use := cpuUse{self: benchutil.ProcessCPU()}
	childrenOnce.Do(func() { children = findChildren(b) })
	for _, path := range children {
		if fields := statFields(path); len(fields) >= 13 {
			utime, err1 := strconv.ParseInt(fields[11], 10, 64)
			stime, err2 := strconv.ParseInt(fields[12], 10, 64)
			if err1 == nil && err2 == nil {
				use.children += time.Duration(utime+stime) * 10 * time.Millisecond
			}
		}
	}
	return use
}

var (
	childrenOnce sync.Once
	// children are the stat files of this process's children.
	children []string
)

// findChildren returns the /proc stat files of this process's children.
func findChildren(b *testing.B) []string {
	b.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		b.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, path := range stats {
		if fields := statFields(path); len(fields) >= 13 && fields[1] == self {
			out = append(out, path)
		}
	}
	if len(out) == 0 {
		b.Fatal("no child process (kube-apiserver, etcd) found in /proc")
	}
	return out
}

// statFields are the fields of a /proc stat file after the parenthesized
// command (state ppid ... utime(14) stime(15)), nil if it is gone.
func statFields(path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil // exited meanwhile
	}
	end := strings.LastIndex(string(raw), ") ")
	if end < 0 {
		return nil
	}
	return strings.Fields(string(raw)[end+1:])
}

// cpuSample is the CPU used so far (readCPU) at a moment.
type cpuSample struct {
	at  time.Time
	use cpuUse
}

// sampleCPU reads the CPU used every interval until the returned func is
// called, which returns the samples: the CPU up to a moment only known
// afterwards (when the last token was seen) is the first sample after it.
func sampleCPU(b *testing.B, interval time.Duration) func() []cpuSample {
	b.Helper()
	done, out := make(chan struct{}), make(chan []cpuSample, 1)
	go func() {
		samples := []cpuSample{{time.Now(), readCPU(b)}}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				out <- append(samples, cpuSample{time.Now(), readCPU(b)})
				return
			case <-t.C:
				samples = append(samples, cpuSample{time.Now(), readCPU(b)})
			}
		}
	}()
	return func() []cpuSample {
		close(done)
		return <-out
	}
}

// cpuAt is the first sample at or after t (the last one if none is).
func cpuAt(samples []cpuSample, t time.Time) cpuSample {
	for _, s := range samples {
		if !s.at.Before(t) {
			return s
		}
	}
	return samples[len(samples)-1]
}

// startEnv starts kube-apiserver, etcd and the control plane as its
// ServiceAccount, with leader election as in production, but holds the
// election (the Lease is the benchmark's) until the bind phase releases it:
// the TrainJobs are created, through the webhook every replica serves,
// before any replica binds them, so the bind is measured apart from their
// creation.
func startEnv(b *testing.B, ctx context.Context) (*testenv.Env, *heldElection) {
	b.Helper()
	_, err := testenv.Assets()
	benchutil.NeedBinaries(b, err)
	env, err := testenv.Start(ctx, testenv.Options{NoControlPlane: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// A stop that takes long shows what it waits for: the goroutines
		// after 10 s go to a file (the manager's grace period is 30 s).
		start := time.Now()
		slow := time.AfterFunc(10*time.Second, func() {
			f, err := os.CreateTemp("", "bench-controller-stop-*.txt")
			if err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 1)
				_ = f.Close()
				fmt.Fprintf(os.Stderr, "controller-bench: the stop takes over 10 s; goroutines in %s\n", f.Name())
			}
		})
		err := env.Stop()
		slow.Stop()
		fmt.Fprintf(os.Stderr, "controller-bench: control plane and API server stopped in %s\n", time.Since(start).Round(time.Millisecond))
		if err != nil {
			b.Log("stopping the control plane and API server:", err)
		}
	})
	// A real cluster serves JobSets (Trainer needs them): the controller
	// reads a new binding's JobSet by name until Trainer has created it.
	// Without the CRD every such read would be a RESTMapper miss instead,
	// which costs a discovery reload: nothing a cluster pays.
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/jobset").Output()
	if err != nil {
		b.Fatal("locating the JobSet module for its CRD:", err)
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{ErrorIfPathMissing: true,
		Paths: []string{filepath.Join(strings.TrimSpace(string(out)), "config", "components", "crd", "bases")}}); err != nil {
		b.Fatal("installing the JobSet CRD:", err)
	}
	cpConfig, err := env.ServiceAccountConfig(ctx)
	if err != nil {
		b.Fatal(err)
	}
	election := holdElection(b, ctx, env.Client)
	if err := env.StartControlPlane(ctx, cpConfig, testenv.Options{}); err != nil {
		b.Fatal(err)
	}
	return env, election
}

// heldElection is the control plane's leader-election Lease while the
// benchmark holds it.
type heldElection struct {
	cl       client.Client
	key      types.NamespacedName
	released bool
}

const benchHolder = "controller-bench"

// holdElection takes the control plane's leader-election Lease before any
// replica runs, for an hour.
func holdElection(b *testing.B, ctx context.Context, cl client.Client) *heldElection {
	b.Helper()
	now := metav1.NowMicro()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "tether-system", Name: controlplane.LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(benchHolder), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now}}
	if err := cl.Create(ctx, lease); err != nil {
		b.Fatal("holding the control plane's election:", err)
	}
	return &heldElection{cl: cl, key: client.ObjectKeyFromObject(lease)}
}

// release gives the Lease up as a stopping leader does (no holder): the
// control plane's elector takes it at its next try. It returns when.
func (h *heldElection) release(b *testing.B, ctx context.Context) time.Time {
	b.Helper()
	lease := &coordinationv1.Lease{}
	if err := h.cl.Get(ctx, h.key, lease); err != nil {
		b.Fatal(err)
	}
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
	if err := h.cl.Update(ctx, lease); err != nil {
		b.Fatal("releasing the control plane's election:", err)
	}
	h.released = true
	return time.Now()
}

// awaitElected waits until the control plane holds the Lease and returns
// when it acquired it (its elector's clock: this host's).
func (h *heldElection) awaitElected(b *testing.B, ctx context.Context) time.Time {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		lease := &coordinationv1.Lease{}
		err := h.cl.Get(ctx, h.key, lease)
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" && *lease.Spec.HolderIdentity != benchHolder && lease.Spec.AcquireTime != nil {
			return lease.Spec.AcquireTime.Time
		}
		if time.Now().After(deadline) {
			b.Fatalf("the control plane was not elected within a minute of the release: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func createNamespace(b *testing.B, ctx context.Context, cl client.Client, ns string) {
	b.Helper()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
}

// floorPhase creates n plain objects, half ConfigMaps the size of a
// WorkerBinding and half Secrets the size of a token Secret, and returns the
// time until watches have seen them all.
func floorPhase(b *testing.B, ctx context.Context, cl client.WithWatch, ns string, n, clients int) time.Duration {
	b.Helper()
	ca := strings.Repeat("C", 1100) // a PEM CA certificate's size
	labels := client.MatchingLabels{floorLabel: "true"}
	want := map[string]bool{}
	for i := range n / 2 {
		name := fmt.Sprintf("floor-%05d", i)
		want["*v1.ConfigMapList/"+name], want["*v1.SecretList/"+name] = true, true
	}
	seen := watchAll(b, ctx, cl, want, labels, ns, &corev1.ConfigMapList{}, &corev1.SecretList{})
	start := time.Now()
	createAll(b, ctx, n, clients, func(i int) client.Object {
		meta := metav1.ObjectMeta{Name: fmt.Sprintf("floor-%05d", i/2), Namespace: ns, Labels: map[string]string{floorLabel: "true"}}
		if i%2 == 0 {
			return &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{
				"jobID": "2f0f1f6e-7c4e-4a57-9d63-6f1d5c1f3a11", "workerID": "8a1c0d2e-5b3f-4e6a-9c7d-1e2f3a4b5c6d",
				"tokenSHA256": strings.Repeat("a", 64), "settings": strings.Repeat("s", 300)}}
		}
		return &corev1.Secret{ObjectMeta: meta, Type: names.TokenSecretType,
			Data: map[string][]byte{names.TokenKey: []byte(strings.Repeat("t", 43)), names.CABundleKey: []byte(ca)}}
	}, cl)
	return seen(start).all()
}

// trainJobPhase creates n unlabeled TrainJobs (the bind phase's, without
// the label: no webhook call, no binding) and returns the time until a
// watch has seen them all.
func trainJobPhase(b *testing.B, ctx context.Context, cl client.WithWatch, ns string, n, clients int) time.Duration {
	b.Helper()
	want := map[string]bool{}
	for i := range n {
		want[fmt.Sprintf("*v1alpha1.TrainJobList/plain-%05d", i)] = true
	}
	seen := watchAll(b, ctx, cl, want, client.MatchingLabels{floorLabel: "true"}, ns, &trainer.TrainJobList{})
	start := time.Now()
	createAll(b, ctx, n, clients, func(i int) client.Object {
		return testobj.MakeTrainJob(fmt.Sprintf("plain-%05d", i), ns).Label(floorLabel, "true").Obj()
	}, cl)
	return seen(start).all()
}

// labeledPhase creates n labeled TrainJobs (through Tether's TrainJob
// webhook, which stamps their ids) while no replica is elected to bind them,
// and returns the time until a watch has seen them all.
func labeledPhase(b *testing.B, ctx context.Context, cl client.WithWatch, ns string, n, clients int) time.Duration {
	b.Helper()
	want := map[string]bool{}
	for i := range n {
		want[fmt.Sprintf("*v1alpha1.TrainJobList/job-%05d", i)] = true
	}
	seen := watchAll(b, ctx, cl, want, client.MatchingLabels{names.BindLabel: names.BindValue}, ns, &trainer.TrainJobList{})
	start := time.Now()
	createAll(b, ctx, n, clients, func(i int) client.Object {
		return testobj.MakeTrainJob(fmt.Sprintf("job-%05d", i), ns).Bound().Obj()
	}, cl)
	return seen(start).all()
}

// The list types watchAll keys bindings and token Secrets by.
const (
	bindingKind = "*v1alpha1.WorkerBindingList"
	secretKind  = "*v1.SecretList"
)

// watchBindings starts watching for the WorkerBindings, their first
// statuses and the token Secrets of TrainJobs job-<first> to
// job-<first+n-1>; see watchAll.
func watchBindings(b *testing.B, ctx context.Context, cl client.WithWatch, ns string, first, n int) func(start time.Time) seenTimes {
	b.Helper()
	want := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("job-%05d", first+i)
		want[bindingKind+"/"+name], want[secretKind+"/"+binding.TokenSecretName(name)], want[bindingKind+"/status/"+name] = true, true, true
	}
	return watchAll(b, ctx, cl, want, client.MatchingLabels{names.BindLabel: names.BindValue}, ns, &tetherv1.WorkerBindingList{}, &corev1.SecretList{})
}

// bindPhase creates n labeled TrainJobs (numbered from first) with an
// elected control plane and returns the time until watches have seen a
// WorkerBinding with its first status and a token Secret for each.
func bindPhase(b *testing.B, ctx context.Context, cl client.WithWatch, ns string, first, n, clients int) time.Duration {
	b.Helper()
	seen := watchBindings(b, ctx, cl, ns, first, n)
	start := time.Now()
	createAll(b, ctx, n, clients, func(i int) client.Object {
		return testobj.MakeTrainJob(fmt.Sprintf("job-%05d", first+i), ns).Bound().Obj()
	}, cl)
	return seen(start).all()
}

// createAll creates n objects from clients goroutines; an error fails the run.
func createAll(b *testing.B, ctx context.Context, n, clients int, obj func(int) client.Object, cl client.Client) {
	b.Helper()
	doAll(b, n, clients, func(i int) error {
		o := obj(i)
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
		return nil
	})
}

// watchAll starts a watch per list type (in ns, with labels) before anything
// is created and returns a function that waits until the watches have
// shown every key in want (seenKeys: kind/name added, kind/status/name a
// WorkerBinding's status; the kind a list's Go type), and returns how long
// after start, per group of keys.
// (A watch from no resourceVersion also replays the objects that exist.)
func watchAll(b *testing.B, ctx context.Context, cl client.WithWatch, want map[string]bool, labels client.MatchingLabels, ns string, lists ...client.ObjectList) func(start time.Time) seenTimes {
	b.Helper()
	ctx, cancel := context.WithTimeoutCause(ctx, phaseTimeout(len(want)), fmt.Errorf("the phase's bound of %s passed", phaseTimeout(len(want))))
	type added struct {
		key string
		at  time.Time
	}
	// Room for every wanted key twice (a watch opened again replays what
	// exists): the watches are read at full speed while the objects are
	// still being created, so an event's time is when it arrived.
	events := make(chan added, 2*len(want))
	var watchers sync.WaitGroup
	var reopened atomic.Int64
	for _, list := range lists {
		// The first watch is opened here, before anything is created; the API
		// server may close a watch at any time (its timeout, a restart of its
		// cache), and a closed one is opened again: from no resourceVersion it
		// replays what exists, and keys are counted once.
		w, err := cl.Watch(ctx, list, client.InNamespace(ns), labels)
		if err != nil {
			cancel()
			b.Fatal("watching:", err)
		}
		kind := fmt.Sprintf("%T", list)
		watchers.Go(func() {
			var lastRV string
			sent := map[string]bool{}
			for {
				for ev := range w.ResultChan() {
					if ev.Type == watch.Error {
						if ctx.Err() != nil {
							break // the phase is over
						}
						fmt.Fprintf(os.Stderr, "controller-bench: watch of %s: %v\n", kind, ev.Object)
						if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
							lastRV = "" // too old to resume from: replay what exists
						}
						continue
					}
					o, ok := ev.Object.(client.Object)
					if !ok {
						continue
					}
					lastRV = o.GetResourceVersion()
					for _, key := range seenKeys(kind, ev.Type, o) {
						if !want[key] || sent[key] {
							continue
						}
						sent[key] = true
						select {
						case events <- added{key: key, at: time.Now()}:
						case <-ctx.Done():
							w.Stop()
							return
						}
					}
				}
				w.Stop()
				for ctx.Err() == nil {
					// Resumed where it stopped: a watch opened from no
					// resourceVersion replays every object that exists, and
					// the API server closes a watch that falls behind (this
					// process starved of CPU), so replays of 10,000 bindings
					// fed on themselves (the growth's decoding took 5 times
					// the CPU in one run of two).
					opts := []client.ListOption{client.InNamespace(ns), labels}
					if lastRV != "" {
						opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: lastRV}})
					}
					if w, err = cl.Watch(ctx, list, opts...); err == nil {
						reopened.Add(1)
						break
					}
					fmt.Fprintf(os.Stderr, "controller-bench: watching %s again: %v\n", kind, err)
					time.Sleep(time.Second)
				}
				if ctx.Err() != nil {
					return
				}
			}
		})
	}
	return func(start time.Time) seenTimes {
		defer func() {
			if n := reopened.Load(); n > 0 {
				fmt.Fprintf(os.Stderr, "controller-bench: the API server closed the phase's watches %d times; each was resumed from its last resourceVersion\n", n)
			}
		}()
		defer watchers.Wait()
		defer cancel()
		total := len(want)
		seen := make(map[string]bool, total)
		lastOf := map[string]time.Time{}
		tick := time.NewTicker(15 * time.Second)
		defer tick.Stop()
		stalled, before, dumped := 0, -1, false
		for len(seen) < total {
			select {
			case <-tick.C:
				// Progress on stderr: b.Log shows only at the end.
				fmt.Fprintf(os.Stderr, "controller-bench: %s: %d of %d objects seen\n", time.Since(start).Round(time.Second), len(seen), total)
				if stalled++; len(seen) != before {
					stalled, before = 0, len(seen)
				}
				if stalled >= 4 && !dumped {
					// A minute without progress: show where the process waits.
					dumped = true
					fmt.Fprintln(os.Stderr, "controller-bench: no progress for a minute; goroutines:")
					_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
				}
				if time.Duration(stalled)*15*time.Second >= stallTimeout {
					b.Fatalf("after %s: watches saw %d of %d objects and nothing new for %s", time.Since(start).Round(time.Second), len(seen), total, stallTimeout)
				}
			case a := <-events:
				seen[a.key] = true
				lastOf[a.key[:strings.LastIndex(a.key, "/")]] = a.at
			case <-ctx.Done():
				b.Fatalf("after %s: watches saw %d of %d objects (%v)", time.Since(start).Round(time.Second), len(seen), total, context.Cause(ctx))
			}
		}
		out := seenTimes{}
		for group, at := range lastOf {
			out[group] = at.Sub(start)
		}
		return out
	}
}

// seenTimes is when a phase's watches had seen the last key of each group
// (a key without its final /name: a list type, or a list type's "status").
type seenTimes map[string]time.Duration

// all is when they had seen every wanted key.
func (t seenTimes) all() time.Duration {
	var last time.Duration
	for _, d := range t {
		last = max(last, d)
	}
	return last
}

// seenKeys are the keys a watch event of o, from a watch of kind (a list's
// Go type), shows: kind/name when o was added, and for a WorkerBinding with
// a status (its first, written after the create) kind/status/name.
func seenKeys(kind string, t watch.EventType, o client.Object) []string {
	var keys []string
	if t == watch.Added {
		keys = append(keys, kind+"/"+o.GetName())
	}
	if wb, ok := o.(*tetherv1.WorkerBinding); ok && wb.Status.Phase != "" && (t == watch.Added || t == watch.Modified) {
		keys = append(keys, kind+"/status/"+o.GetName())
	}
	return keys
}

// verify checks every TrainJob's binding and Secret: controlled by the
// TrainJob, the job id stamped on it, the Secret's token the one whose hash
// the binding holds.
func verify(b *testing.B, ctx context.Context, cl client.Client, ns string, jobs int) {
	b.Helper()
	var bindings tetherv1.WorkerBindingList
	var secrets corev1.SecretList
	var tjs metav1.PartialObjectMetadataList
	tjs.SetGroupVersionKind(trainjob.GVK.GroupVersion().WithKind("TrainJobList"))
	for _, l := range []client.ObjectList{&bindings, &secrets, &tjs} {
		// The bound ones (the unlabeled TrainJobs of trainJobPhase are not).
		if err := cl.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{names.BindLabel: names.BindValue}); err != nil {
			b.Fatal(err)
		}
	}
	bound := map[string]*tetherv1.WorkerBinding{}
	for i := range bindings.Items {
		bound[bindings.Items[i].Name] = &bindings.Items[i]
	}
	tokens := map[string]*corev1.Secret{}
	for i := range secrets.Items {
		tokens[secrets.Items[i].Name] = &secrets.Items[i]
	}
	var errs []error
	for _, tj := range tjs.Items {
		wb, secret := bound[tj.Name], tokens[binding.TokenSecretName(tj.Name)]
		switch {
		case wb == nil || secret == nil:
			errs = append(errs, fmt.Errorf("%s: binding %v, Secret %v", tj.Name, wb != nil, secret != nil))
		case !metav1.IsControlledBy(wb, &tj) || !metav1.IsControlledBy(secret, &tj):
			errs = append(errs, fmt.Errorf("%s: binding or Secret not controlled by the TrainJob", tj.Name))
		case wb.Spec.JobID == "" || wb.Spec.JobID != tj.Annotations[names.JobIDAnnotation]:
			errs = append(errs, fmt.Errorf("%s: binding job id %q, TrainJob's %q", tj.Name, wb.Spec.JobID, tj.Annotations[names.JobIDAnnotation]))
		default:
			token, err := binding.ParseToken(string(secret.Data[names.TokenKey]))
			if err != nil || token.Hash() != wb.Spec.TokenSHA256 {
				errs = append(errs, fmt.Errorf("%s: the Secret's token does not match the binding's hash (%v)", tj.Name, err))
			}
		}
	}
	if len(tjs.Items) != jobs {
		errs = append(errs, fmt.Errorf("%d TrainJobs in %s, want %d", len(tjs.Items), ns, jobs))
	}
	if len(errs) > 0 {
		b.Fatalf("%d of %d TrainJobs wrongly bound; first: %v", len(errs), jobs, errors.Join(errs[:min(5, len(errs))]...))
	}
}

// logControllerStats logs the binding controller's reconciles (by result,
// mean duration) and the control plane's API requests by verb, from the
// controller-runtime registry: what a bind costs, per TrainJob.
func logControllerStats(b *testing.B) {
	b.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Log("gathering controller metrics:", err)
		return
	}
	var lines []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "controller_runtime_reconcile_total":
				if labels["controller"] == "workerbinding" && m.GetCounter().GetValue() > 0 {
					lines = append(lines, fmt.Sprintf("reconciles %s: %.0f", labels["result"], m.GetCounter().GetValue()))
				}
			case "controller_runtime_reconcile_time_seconds":
				if h := m.GetHistogram(); labels["controller"] == "workerbinding" && h.GetSampleCount() > 0 {
					lines = append(lines, fmt.Sprintf("reconcile mean %.1fms", 1000*h.GetSampleSum()/float64(h.GetSampleCount())))
				}
			case "rest_client_requests_total":
				if m.GetCounter().GetValue() > 0 {
					lines = append(lines, fmt.Sprintf("requests %s %s: %.0f", labels["method"], labels["code"], m.GetCounter().GetValue()))
				}
			}
		}
	}
	slices.Sort(lines)
	b.Logf("control plane (and benchmark client) so far: %s", strings.Join(lines, "; "))
}

// heapInUse is the Go heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// rssMiB is this process's resident set size (VmRSS).
func rssMiB(b *testing.B) float64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kib / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
