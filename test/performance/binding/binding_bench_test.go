package binding_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/replicalease"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/benchutil"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
	bench "github.com/tether-dev/tether/test/performance/binding/loadproto"
)

const (
	namespace = "bench"

	// The control plane's production settings (controlplane.DefaultOptions);
	// testenv shortens the status interval for its tests.
	statusInterval   = 30 * time.Second
	missedHeartbeats = bench.MissedHeartbeats

	// createWorkers bounds the objects created concurrently.
	createWorkers = 16
)

// Targets, reported next to the figures, never asserted.
const (
	targetSessions   = 10000
	targetCores      = 0.5
	targetKiBSession = 40.0
	targetAckP99ms   = 20.0
	targetWritesPerS = 20.0
)

// benchConfig is the load, from TETHER_BENCH_* environment variables.
type benchConfig struct {
	sessions   int
	hold       time.Duration
	dialers    int
	dialRate   int // sessions opened per second at most (0: no limit)
	registrars int
	cpuProfile string
	memProfile string
	// trace, mutexProfile and blockProfile: the server's execution trace
	// and contention profiles of the measured phase; loadgenTrace the
	// generator's execution trace of it.
	trace, mutexProfile, blockProfile, loadgenTrace string
	// statusInterval is the control plane's; only diagnostics change it.
	statusInterval time.Duration
	// leaderElect keeps testenv's leader election (see BenchmarkBindingSessions).
	leaderElect bool
}

func loadConfig(b *testing.B) benchConfig {
	b.Helper()
	c := benchConfig{sessions: 10000, hold: 60 * time.Second, dialers: 32, dialRate: 100, registrars: 32,
		cpuProfile: os.Getenv("TETHER_BENCH_CPUPROFILE"), memProfile: os.Getenv("TETHER_BENCH_MEMPROFILE"),
		trace: os.Getenv("TETHER_BENCH_TRACE"), mutexProfile: os.Getenv("TETHER_BENCH_MUTEXPROFILE"),
		blockProfile: os.Getenv("TETHER_BENCH_BLOCKPROFILE"), loadgenTrace: os.Getenv("TETHER_BENCH_LOADGEN_TRACE"),
		statusInterval: statusInterval}
	if benchutil.Smoke(b) {
		// 20 sessions held for the shortest measured phase, one heartbeat
		// interval: each registers, opens, goes Running and is acked.
		c.sessions, c.hold = 20, 10*time.Second
	}
	if s := os.Getenv("TETHER_BENCH_STATUS_INTERVAL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Second {
			b.Fatalf("TETHER_BENCH_STATUS_INTERVAL=%q: want a duration of at least 1s", s)
		}
		c.statusInterval = d
	}
	switch s := os.Getenv("TETHER_BENCH_LEADER_ELECT"); s {
	case "", "false", "0":
	case "true", "1":
		c.leaderElect = true
	default:
		b.Fatalf("TETHER_BENCH_LEADER_ELECT=%q: want true or false", s)
	}
	if s := os.Getenv("TETHER_BENCH_HOLD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Second {
			b.Fatalf("TETHER_BENCH_HOLD=%q: want a duration of at least 10s, such as 60s", s)
		}
		c.hold = d
	}
	num := func(key string, v *int) {
		if s := os.Getenv(key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				b.Fatalf("%s=%q: want a positive integer", key, s)
			}
			*v = n
		}
	}
	num("TETHER_BENCH_SESSIONS", &c.sessions)
	num("TETHER_BENCH_DIALERS", &c.dialers)
	if s := os.Getenv("TETHER_BENCH_DIAL_RATE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			b.Fatalf("TETHER_BENCH_DIAL_RATE=%q: want sessions per second, 0 for no limit", s)
		}
		c.dialRate = n
	}
	num("TETHER_BENCH_REGISTRARS", &c.registrars)
	return c
}

// BenchmarkBindingSessions holds N sidecar sessions on one control-plane
// replica and measures what they cost it; see the package documentation.
// It runs once whatever b.N is: use -benchtime 1x.
func BenchmarkBindingSessions(b *testing.B) {
	cfg := loadConfig(b)
	nofile, nofileNote := bench.RaiseNofile()
	progressf("RLIMIT_NOFILE of the server process: %d (%s)", nofile, nofileNote)
	if need := uint64(cfg.sessions) + 1000; nofile < need {
		b.Logf("WARNING: %d sessions need about %d descriptors in each process; expect dial failures past ~%d sessions",
			cfg.sessions, need, nofile-1000)
	}
	// The control plane's production logger (cmd/tether-control-plane: zap,
	// JSON, info), writing nowhere: its log calls cost what they cost in
	// production.
	logf.SetLogger(controlplane.LazyValues(zap.New(zap.WriteTo(io.Discard))))
	ctx := b.Context()

	_, err := testenv.Assets()
	benchutil.NeedBinaries(b, err)
	start := time.Now()
	env, err := testenv.Start(ctx, testenv.Options{AsAdmin: true, ControlPlane: func(o *controlplane.Options) {
		o.StatusInterval = cfg.statusInterval
		// Production (testenv writes liveness every few seconds for its tests).
		o.LivenessWriteInterval = max(bindingserver.DefaultLivenessWriteInterval, cfg.statusInterval)
		o.MissedHeartbeats = missedHeartbeats
		// Without leader election the control plane runs its controller at
		// once, as the elected replica does. With it (testenv's default), a
		// lease renewal that the loaded API server does not answer within
		// the renew deadline stops the whole manager, the binding server
		// with it, and ends the run; TETHER_BENCH_LEADER_ELECT=true shows it.
		o.LeaderElect = cfg.leaderElect
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.Stop(); err != nil {
			b.Log("stopping the control plane and API server:", err)
		}
	})
	progressf("control plane up in %s; binding server %s; status interval %s, %d missed heartbeats", time.Since(start).Round(time.Millisecond),
		env.BindingURL, cfg.statusInterval, missedHeartbeats)
	if cfg.statusInterval != statusInterval {
		b.Logf("diagnostic run: TETHER_BENCH_STATUS_INTERVAL=%s instead of the production %s", cfg.statusInterval, statusInterval)
	}
	if cfg.leaderElect {
		waitForLeader(b, ctx, env)
	}

	admissions0 := gatherCounter(b, "tether_pod_admissions_total", map[string]string{"outcome": "skipped", "reason": string(mutate.SkipNoTrainJob)})
	ids := createObjects(b, ctx, env, cfg.sessions)
	if got := gatherCounter(b, "tether_pod_admissions_total", map[string]string{"outcome": "skipped", "reason": string(mutate.SkipNoTrainJob)}) - admissions0; int(got) < cfg.sessions {
		b.Fatalf("the pod webhook skipped %v of %d pods as NoTrainJob; it was not called for every pod", got, cfg.sessions)
	} else {
		progressf("pod webhook: skipped all %d pods (no TrainJob), none injected", cfg.sessions)
	}
	waitForCache(b, ctx, env, ids, cfg.registrars)

	rssObjects := measureMemory()
	progressf("server memory with %d bindings and pods cached: %s", len(ids), rssObjects)

	// Registration.
	lg := startLoadGenerator(b, env, ids, cfg, b.TempDir())
	var registered struct {
		Registered, Failed int
		Seconds            float64
	}
	lg.await(b, "registered", 5*time.Minute+time.Duration(cfg.sessions)*20*time.Millisecond, &registered)
	progressf("registered %d workers (%d failed) in %.1fs", registered.Registered, registered.Failed, registered.Seconds)
	if registered.Registered == 0 {
		b.Fatal("no worker registered; see the generator's output")
	}
	// Let the cache take in the registrations' status writes before the baseline.
	time.Sleep(3 * time.Second)
	base := measureMemory()
	progressf("server memory before the sessions open (registered): %s", base)
	lg.send(b, "go")

	// Sessions.
	var established struct {
		Established, Failed int
		Seconds             float64
	}
	lg.await(b, "established", 5*time.Minute+time.Duration(cfg.sessions)*20*time.Millisecond, &established)
	progressf("established %d sessions (%d failed) in %.1fs; warming up one heartbeat interval", established.Established, established.Failed, established.Seconds)
	checkServerUp(b, env)

	// The measured phase: the generator announces its start and end.
	lg.await(b, "hold-start", 2*time.Minute+bench.MaxSettle, nil)
	b.ResetTimer()
	cpu0, t0 := benchutil.ProcessCPU(), time.Now()
	procs0 := childCPU(lg.cmd.Process.Pid)
	pressure0 := benchutil.CPUPressure()
	writes0, scrapeErr := statusWrites(ctx, env)
	if cfg.cpuProfile != "" {
		if f, err := os.Create(cfg.cpuProfile); err != nil {
			b.Log("CPU profile:", err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			b.Log("CPU profile (-cpuprofile already running?):", err)
			_ = f.Close()
		} else {
			defer f.Close()
		}
	}
	if cfg.memProfile != "" {
		// The measured phase's allocations: go tool pprof -base <this> <the end's>.
		writeHeapProfile(cfg.memProfile + ".start")
	}
	stopDiagnostics := startDiagnostics(b, cfg)
	stopLeaseWatch := watchReplicaLease(ctx, env)
	progressf("measured phase: %s", cfg.hold)

	lg.await(b, "hold-end", cfg.hold+2*time.Minute, nil)
	cpu1, t1 := benchutil.ProcessCPU(), time.Now()
	b.StopTimer()
	checkServerUp(b, env)
	if cfg.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	stopDiagnostics()
	leaseAge := stopLeaseWatch()
	pressure1 := benchutil.CPUPressure()
	procs1 := childCPU(lg.cmd.Process.Pid)
	writes1, err := statusWrites(ctx, env)
	if scrapeErr == nil {
		scrapeErr = err
	}
	end := measureMemory()
	if cfg.memProfile != "" {
		writeHeapProfile(cfg.memProfile)
	}
	server := gatherServer(b)
	lg.send(b, "done")

	var res bench.LoadgenResult
	lg.await(b, "result", 3*time.Minute, &res)
	lg.wait(b, time.Minute)
	if res.Fatal != "" {
		b.Fatalf("load generator: %s", res.Fatal)
	}

	wall := t1.Sub(t0).Seconds()
	writes := writes1.sub(writes0)
	cores := (cpu1 - cpu0).Seconds() / wall
	sessions := res.Held
	perSession := 0.0
	if sessions > 0 {
		perSession = float64(end.rssKiB-base.rssKiB) / float64(sessions)
	}
	progressf("generator: RLIMIT_NOFILE %d (%s); registered %d/%d in %.1fs (%.0f/s); established %d (failed %d) in %.1fs (%.0f/s); errors: register %v, dial %v",
		res.Nofile, res.NofileNote, res.Registered, res.Sessions, res.RegisterSeconds, float64(res.Registered)/res.RegisterSeconds,
		res.Established, res.DialFailed, res.EstablishSeconds, float64(res.Established)/res.EstablishSeconds, res.RegisterErrors, res.DialErrors)
	progressf("settle: every session acked Running %.1fs after the warm-up interval (%d still not when the hold started)", res.SettleSeconds, res.NotRunningAtStart)
	progressf("measured phase %.1fs (generator %.1fs): held %d sessions, %d closed during it %v; heartbeats sent %d (%.0f/s), acked %d (%d after more than an interval), unanswered %d, skipped %d, stale %d, non-Running %d, send errors %d, unexpected frames %d",
		wall, res.HoldSeconds, res.Held, res.ClosedDuringHold, res.CloseCodes, res.HeartbeatsSent, float64(res.HeartbeatsSent)/res.HoldSeconds,
		res.Acks, res.Late, res.Unanswered, res.Skipped, res.StaleAcks, res.NonRunningAcks, res.SendErrors, res.UnexpectedFrames)
	progressf("ack latency (generator; n=%d, unanswered ones counted as their age at the end): p50 %.2fms p90 %.2fms p99 %.2fms p99.9 %.2fms max %.2fms; send lag behind schedule: p50 %.2fms p99 %.2fms max %.2fms",
		res.Latency.N, res.Latency.P50, res.Latency.P90, res.Latency.P99, res.Latency.P999, res.Latency.Max, res.SendLag.P50, res.SendLag.P99, res.SendLag.Max)
	progressf("first heartbeat of each session -> ack (Registered -> Running write, while opening; n=%d): p50 %.2fms p90 %.2fms p99 %.2fms max %.2fms",
		res.FirstAck.N, res.FirstAck.P50, res.FirstAck.P90, res.FirstAck.P99, res.FirstAck.Max)
	progressf("server process: %.2fs CPU in %.1fs = %.3f cores; memory before sessions %s; after %s; delta %d KiB RSS (%.1f KiB/session), %.1f KiB/session after scavenging, Go heap %+.1f KiB/session, stacks %+.1f KiB/session, goroutines %+d",
		(cpu1 - cpu0).Seconds(), wall, cores, base, end, end.rssKiB-base.rssKiB, perSession,
		perSessionKiB(end.rssScavengedKiB-base.rssScavengedKiB, sessions), perSessionKiB((end.heapInuse-base.heapInuse)/1024, sessions),
		perSessionKiB((end.stackInuse-base.stackInuse)/1024, sessions), end.goroutines-base.goroutines)
	progressf("server metrics: %s", server)
	for name, c := range procs1 {
		progressf("%s: %.3f cores during the measured phase", name, (c-procs0[name]).Seconds()/wall)
	}
	progressf("generator process: %.3f cores during the measured phase", res.CPUCores)
	progressf("CPU pressure before: %s; after: %s", pressure0, pressure1)
	progressf("replica Lease: oldest renewal seen in the measured phase %s old (it vouches for its sessions while younger than %s; past that every binding is rewritten, twice)",
		leaseAge, replicalease.DefaultDuration*2/3)
	if scrapeErr != nil {
		progressf("status writes: kube-apiserver /metrics: %v", scrapeErr)
	} else {
		progressf("status writes (kube-apiserver): %.0f WorkerBinding status PUTs in the measured phase (%.1f/s), %.0f of them conflicts, %.1fms mean time in the API server",
			writes.total, writes.total/wall, writes.conflicts, 1000*writes.durationSum/max(1, writes.durationCount))
	}

	b.ReportMetric(float64(sessions), "sessions")
	b.ReportMetric(cores, "server-cpu-cores")
	b.ReportMetric(perSession, "rss-kib-per-session")
	b.ReportMetric(perSessionKiB(end.rssScavengedKiB-base.rssScavengedKiB, sessions), "rss-scavenged-kib-per-session")
	// The replica as a whole: N bindings and N trainer pods cached, N
	// sessions held (what the chart's limits.memory must hold, with room).
	b.ReportMetric(float64(end.rssKiB)/1024, "rss-mib")
	b.ReportMetric(float64(end.heapInuse)/(1<<20), "heap-inuse-mib")
	b.ReportMetric(float64(res.Unanswered+res.Late), "acks-over-interval")
	b.ReportMetric(res.Latency.P50, "ack-p50-ms")
	b.ReportMetric(res.Latency.P99, "ack-p99-ms")
	if scrapeErr == nil {
		b.ReportMetric(writes.total, "status-writes")
		b.ReportMetric(writes.total/wall, "status-writes-per-s")
		b.ReportMetric(1000*writes.durationSum/max(1, writes.durationCount), "status-write-apiserver-ms")
	}
	for name, c := range procs1 {
		b.ReportMetric((c-procs0[name]).Seconds()/wall, name+"-cpu-cores")
	}
	b.ReportMetric(res.CPUCores, "loadgen-cpu-cores")
	b.ReportMetric(res.SettleSeconds, "settle-s")

	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISSED"
	}
	summary := fmt.Sprintf("binding server: %d sessions held (target %d: %s), %.3f cores (target <= %.1f: %s), %.1f KiB/session (target <= %.0f: %s), ack p50 %.2fms p99 %.2fms (target p99 <= %.0fms: %s), %.0f status writes in %.0fs = %.1f/s (target <= %.0f: %s)",
		sessions, targetSessions, mark(sessions >= targetSessions), cores, targetCores, mark(cores <= targetCores),
		perSession, targetKiBSession, mark(perSession <= targetKiBSession), res.Latency.P50, res.Latency.P99, targetAckP99ms,
		mark(res.Latency.P99 <= targetAckP99ms), writes.total, wall, writes.total/wall, targetWritesPerS, mark(scrapeErr == nil && writes.total/wall <= targetWritesPerS))
	b.Log(summary)
	if p := max(pressureAvg10(pressure0), pressureAvg10(pressure1)); p > 50 {
		b.Logf("CPU pressure: runnable work waited for a core %.0f%% of the time (avg10); kube-apiserver, etcd, the server and the generator share this machine's %d cores (with anything else running on it), so the latency figures are the machine's as much as the server's", p, runtime.NumCPU())
	}
	fmt.Fprintln(os.Stderr, summary)
}

// watchReplicaLease polls the replica Leases until stopped and returns the
// oldest renewal seen (its age when read): a Lease the loaded API server
// did not renew in time stops vouching, which turns every heartbeat into a
// status write (pacing.go), a storm the measured phase would otherwise not
// explain.
func watchReplicaLease(ctx context.Context, env *testenv.Env) (stop func() time.Duration) {
	done := make(chan struct{})
	result := make(chan time.Duration, 1)
	go func() {
		var oldest time.Duration
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			leases := &coordinationv1.LeaseList{}
			if err := env.Client.List(ctx, leases, client.MatchingLabels{names.ReplicaLeaseLabel: "true"}); err == nil {
				for _, l := range leases.Items {
					if r := l.Spec.RenewTime; r != nil {
						oldest = max(oldest, time.Since(r.Time))
					}
				}
			}
			select {
			case <-done:
				result <- oldest.Round(time.Millisecond)
				return
			case <-t.C:
			}
		}
	}()
	return func() time.Duration {
		close(done)
		return <-result
	}
}

func writeHeapProfile(path string) {
	if f, err := os.Create(path); err == nil {
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		_ = f.Close()
	}
}

// startDiagnostics starts the measured phase's execution trace and
// contention profiles that cfg asks for; the returned function stops them
// and writes the profiles.
func startDiagnostics(b *testing.B, cfg benchConfig) (stop func()) {
	b.Helper()
	var stops []func()
	if cfg.trace != "" {
		if f, err := os.Create(cfg.trace); err != nil {
			b.Log("trace:", err)
		} else if err := trace.Start(f); err != nil {
			b.Log("trace (-trace already running?):", err)
			_ = f.Close()
		} else {
			stops = append(stops, func() { trace.Stop(); _ = f.Close() })
		}
	}
	profile := func(path, name string, enable func(on bool)) {
		if path == "" {
			return
		}
		enable(true)
		stops = append(stops, func() {
			enable(false)
			f, err := os.Create(path)
			if err != nil {
				b.Log(name, "profile:", err)
				return
			}
			_ = pprof.Lookup(name).WriteTo(f, 0)
			_ = f.Close()
		})
	}
	// Every 10th contention event; blocking events of 100µs or more.
	profile(cfg.mutexProfile, "mutex", func(on bool) {
		if on {
			runtime.SetMutexProfileFraction(10)
		} else {
			runtime.SetMutexProfileFraction(0)
		}
	})
	profile(cfg.blockProfile, "block", func(on bool) {
		if on {
			runtime.SetBlockProfileRate(int(100 * time.Microsecond))
		} else {
			runtime.SetBlockProfileRate(0)
		}
	})
	return func() {
		for _, f := range stops {
			f()
		}
	}
}

// pressureAvg10 reads avg10 from a /proc/pressure/cpu line (0 if absent).
func pressureAvg10(line string) float64 {
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, "avg10="); ok {
			p, _ := strconv.ParseFloat(v, 64)
			return p
		}
	}
	return 0
}

// checkServerUp fails the benchmark if the binding server stopped
// listening: the control plane's manager stops everything, the binding
// server included, when it loses its leader lease.
func checkServerUp(b *testing.B, env *testenv.Env) {
	b.Helper()
	tc, err := bench.TLSConfig(env.CAFile)
	if err != nil {
		b.Fatal(err)
	}
	// A full handshake: a bare TCP probe makes the server log a handshake error.
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", env.BindingAddr, tc)
	if err != nil {
		b.Fatalf("the binding server at %s is gone (%v): the control plane stopped; look for \"leader election lost\" or \"Failed to renew lease\" above", env.BindingAddr, err)
	}
	_ = c.Close()
}

func perSessionKiB(kib int64, sessions int) float64 {
	if sessions == 0 {
		return 0
	}
	return float64(kib) / float64(sessions)
}

// progressf prints progress at once (b.Log shows only when the benchmark ends).
func progressf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s binding-bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// waitForLeader creates the control plane's namespace, which testenv
// creates only with the shipped RBAC (not AsAdmin), so that it wins the
// leader election and runs its controller as the elected replica would:
// the benchmark measures a replica that does everything.
func waitForLeader(b *testing.B, ctx context.Context, env *testenv.Env) {
	b.Helper()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tether-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		lease := &coordinationv1.Lease{}
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: "tether-system", Name: controlplane.LeaderElectionID}, lease)
		if err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
			progressf("control plane elected leader (%s)", *lease.Spec.HolderIdentity)
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the control plane did not win the leader election within a minute: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// createObjects creates, for each worker, a trainer pod that passes the
// binding server's identity check, an (unbound) TrainJob and a WorkerBinding
// it owns holding its token's hash, and returns the identities. Pods are
// created first so that every binding's pod exists by the time the binding
// is visible, and the pod webhook leaves them alone (no TrainJob yet). The
// binding server accepts a token only while the binding's owning TrainJob
// exists.
func createObjects(b *testing.B, ctx context.Context, env *testenv.Env, n int) []bench.Identity {
	b.Helper()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	// No controller-manager runs, so nobody creates the default
	// ServiceAccount that pod admission requires.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	// The kubelet's part: every pod's projected pod token (TokenRequest).
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]bench.Identity, n)
	for i := range ids {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("job-%d", i)
		ids[i] = bench.Identity{Token: hex.EncodeToString(raw[:]), Binding: name, JobID: uuid.NewString(), WorkerID: uuid.NewString(),
			Namespace: namespace, Pod: name + "-node-0-0"}
	}

	err = parallel(ctx, "pods", n, createWorkers, func(i int) error {
		id := &ids[i]
		status := mutate.InjectionStatus{Version: mutate.StatusVersion, JobID: id.JobID, WorkerID: id.WorkerID,
			Sidecar: mutate.SidecarName, ArtifactVolume: mutate.ArtifactVolumeName}.String()
		pod := testobj.MakeTrainerPod(id.Binding, namespace).Routed().Name(id.Pod).Annotation(names.PodStatusAnnotation, status).Obj()
		err := retryCreate(ctx, func() error { return c.Create(ctx, pod) })
		if apierrors.IsAlreadyExists(err) { // created by an attempt whose answer was lost
			err = c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: id.Pod}, pod)
		}
		if err != nil {
			return err
		}
		// The pod webhook (failurePolicy Fail) was called; with no TrainJob it
		// must leave the pod alone.
		if len(pod.Spec.InitContainers) != 0 || pod.Annotations[names.PodStatusAnnotation] != status {
			return fmt.Errorf("pod %s was changed at admission: init containers %d, %s=%q", pod.Name,
				len(pod.Spec.InitContainers), names.PodStatusAnnotation, pod.Annotations[names.PodStatusAnnotation])
		}
		id.UID = string(pod.UID)
		id.PodToken, err = testenv.PodToken(ctx, cs, pod)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	err = parallel(ctx, "bindings", n, createWorkers, func(i int) error {
		id := &ids[i]
		tj := testobj.MakeTrainJob(id.Binding, namespace).Obj()
		err := retryCreate(ctx, func() error { return c.Create(ctx, tj) })
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: id.Binding}, tj)
		}
		if err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(id.Token))
		wb := &tetherv1.WorkerBinding{
			ObjectMeta: metav1.ObjectMeta{Name: id.Binding, Namespace: namespace, Labels: map[string]string{names.BindLabel: names.BindValue},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: trainjob.GVK.GroupVersion().String(), Kind: trainjob.GVK.Kind,
					Name: tj.Name, UID: tj.UID, Controller: ptr.To(true)}}},
			Spec: tetherv1.WorkerBindingSpec{TrainJobName: id.Binding, JobID: id.JobID, WorkerID: id.WorkerID,
				TokenSecretName: binding.TokenSecretName(id.Binding), TokenSHA256: hex.EncodeToString(sum[:])},
		}
		err = retryCreate(ctx, func() error { return c.Create(ctx, wb) })
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return ids
}

// retryCreate retries a create on errors a loaded API server may return.
func retryCreate(ctx context.Context, create func() error) error {
	var err error
	for attempt := range 6 {
		if err = create(); err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		}
	}
	return err
}

// parallel runs f(0..n-1) on workers goroutines, printing progress, and
// returns the first error.
func parallel(ctx context.Context, what string, n, workers int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, done atomic.Int64
	var firstErr error
	var once sync.Once
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				d := done.Load()
				progressf("%s: %d/%d (%.0f/s)", what, d, n, float64(d)/time.Since(start).Seconds())
			}
		}
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("%s: item %d: %w", what, i, err) })
					cancel()
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	if firstErr == nil && ctx.Err() != nil && done.Load() < int64(n) {
		firstErr = fmt.Errorf("%s: %w", what, context.Cause(ctx))
	}
	if firstErr == nil {
		progressf("%s: %d done in %.1fs (%.0f/s)", what, n, time.Since(start).Seconds(), float64(n)/time.Since(start).Seconds())
	}
	return firstErr
}

// waitForCache waits until the binding server finds every binding: a
// session request with the binding's token and a wrong worker id is refused
// with 403 (identity mismatch) once the binding is in its cache, with 401
// (unknown token) before. Nothing is written.
func waitForCache(b *testing.B, ctx context.Context, env *testenv.Env, ids []bench.Identity, workers int) {
	b.Helper()
	hc, err := bench.HTTPSClient(env.CAFile, workers)
	if err != nil {
		b.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	pending := make([]int, len(ids))
	for i := range pending {
		pending[i] = i
	}
	deadline := time.Now().Add(3 * time.Minute)
	for round := 0; len(pending) > 0; round++ {
		var mu sync.Mutex
		var missing []int
		err := parallel(ctx, "cache probe", len(pending), workers, func(k int) error {
			id := ids[pending[k]]
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.BindingURL+binding.PathSession, nil)
			if err != nil {
				return err
			}
			req.Header = bench.SessionHeader(id)
			req.Header.Set(names.HeaderWorkerID, "bench-cache-probe")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusForbidden:
				return nil
			case http.StatusUnauthorized:
				mu.Lock()
				missing = append(missing, pending[k])
				mu.Unlock()
				return nil
			}
			return fmt.Errorf("probe of %s: HTTP %d: %s", id.Binding, resp.StatusCode, body)
		})
		if err != nil {
			b.Fatal(err)
		}
		pending = missing
		if len(pending) > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("%d bindings still unknown to the binding server after 3 minutes (e.g. %s)", len(pending), ids[pending[0]].Binding)
			}
			progressf("cache probe: %d bindings not cached yet", len(pending))
			time.Sleep(time.Second)
		}
	}
	progressf("binding server's cache holds all %d bindings", len(ids))
}

// ---- The benchmark's side of the load generator ----

// loadgenPackage is the generator's package, from the module's root.
const loadgenPackage = "./test/performance/binding/loadgen"

// buildLoadGenerator builds the generator (loadgenPackage, a command of its
// own) into dir. Without -trimpath (which the harness's shipped helpers
// use) it reuses the packages go test just compiled for the benchmark:
// with it, a cold cache compiled them all again (a minute on 2 busy cores).
func buildLoadGenerator(dir string) (string, error) {
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "loadgen"), loadgenPackage)
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", loadgenPackage, err, out)
	}
	return filepath.Join(dir, "loadgen"), nil
}

type loadgenEvent struct {
	name string
	data json.RawMessage
}

// loadgen is the running generator process.
type loadgen struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan loadgenEvent
	exited chan struct{}
	err    error // set before exited closes
}

func startLoadGenerator(b *testing.B, env *testenv.Env, ids []bench.Identity, cfg benchConfig, dir string) *loadgen {
	b.Helper()
	idPath := filepath.Join(dir, "identities.jsonl")
	f, err := os.Create(idPath)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, id := range ids {
		if err := enc.Encode(id); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	result := os.Getenv("TETHER_BENCH_RESULT") // keep the generator's JSON
	if result == "" {
		result = filepath.Join(dir, "result.json")
	}
	lc := bench.LoadgenConfig{ServerURL: env.BindingURL, CAFile: env.CAFile, Identities: idPath, Result: result,
		Hold: cfg.hold.String(), Dialers: cfg.dialers, DialRate: cfg.dialRate, Registrars: cfg.registrars, Trace: cfg.loadgenTrace,
		Deadline: time.Now().Add(20*time.Minute + cfg.hold + time.Duration(len(ids))*50*time.Millisecond)}
	raw, err := json.Marshal(lc)
	if err != nil {
		b.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "loadgen.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		b.Fatal(err)
	}

	bin, err := buildLoadGenerator(dir)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-config="+cfgPath)
	cmd.Stderr = os.Stderr
	// If the benchmark dies, so does the generator (it also exits when its
	// stdin closes, and at its deadline).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	lg := &loadgen{cmd: cmd, events: make(chan loadgenEvent, 16), exited: make(chan struct{})}
	if lg.stdin, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	progressf("load generator started, pid %d", cmd.Process.Pid)
	b.Cleanup(func() {
		select {
		case <-lg.exited:
		default:
			// Kill by PID: the run failed or was interrupted.
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-lg.exited
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			rest, ok := strings.CutPrefix(line, bench.EventPrefix)
			if !ok {
				fmt.Fprintln(os.Stderr, "loadgen:", line)
				continue
			}
			name, data, _ := strings.Cut(rest, " ")
			lg.events <- loadgenEvent{name: name, data: json.RawMessage(data)}
		}
		lg.err = cmd.Wait()
		close(lg.exited)
	}()
	return lg
}

// await waits for the generator's next event, which must be name, and
// decodes its data into v (if not nil).
func (lg *loadgen) await(b *testing.B, name string, timeout time.Duration, v any) {
	b.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ev := <-lg.events:
		if ev.name == "fatal" {
			b.Fatalf("load generator failed: %s", ev.data)
		}
		if ev.name != name {
			b.Fatalf("load generator: got event %q (%s), want %q", ev.name, ev.data, name)
		}
		if v != nil {
			if err := json.Unmarshal(ev.data, v); err != nil {
				b.Fatalf("load generator event %s: %v", name, err)
			}
		}
	case <-lg.exited:
		b.Fatalf("load generator exited (%v) before %q", lg.err, name)
	case <-t.C:
		b.Fatalf("load generator: no %q within %s", name, timeout)
	case <-b.Context().Done():
		b.Fatal(b.Context().Err())
	}
}

func (lg *loadgen) send(b *testing.B, msg string) {
	b.Helper()
	if _, err := io.WriteString(lg.stdin, msg+"\n"); err != nil {
		b.Fatalf("telling the load generator %q: %v", msg, err)
	}
}

func (lg *loadgen) wait(b *testing.B, timeout time.Duration) {
	b.Helper()
	_ = lg.stdin.Close()
	select {
	case <-lg.exited:
		if lg.err != nil {
			b.Errorf("load generator: %v", lg.err)
		}
	case <-time.After(timeout):
		b.Errorf("load generator did not exit within %s", timeout)
	}
}

// ---- Measurements of the server process ----

type memory struct {
	rssKiB, rssScavengedKiB int64
	heapInuse, stackInuse   int64
	goroutines              int
}

func (m memory) String() string {
	return fmt.Sprintf("RSS %d KiB (%d KiB scavenged), Go heap in use %d KiB, stacks %d KiB, %d goroutines",
		m.rssKiB, m.rssScavengedKiB, m.heapInuse/1024, m.stackInuse/1024, m.goroutines)
}

// measureMemory reads VmRSS after a GC, then again after returning free
// memory to the OS, and the Go runtime's view.
func measureMemory() memory {
	var m memory
	runtime.GC()
	m.rssKiB = rssKiB()
	debug.FreeOSMemory()
	m.rssScavengedKiB = rssKiB()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heapInuse, m.stackInuse, m.goroutines = int64(ms.HeapInuse), int64(ms.StackInuse), runtime.NumGoroutine()
	return m
}

func rssKiB() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// childCPU is the CPU time used so far by this process's children
// (kube-apiserver and etcd; the generator reports its own), by name.
func childCPU(exclude int) map[string]time.Duration {
	out := map[string]time.Duration{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == exclude {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		s := string(raw)
		opening, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if opening < 0 || closing < opening {
			continue
		}
		comm := s[opening+1 : closing]
		f := strings.Fields(s[closing+1:])
		if len(f) < 13 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != self {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		switch comm {
		case "kube-apiserver":
			comm = "apiserver"
		case "etcd":
		default:
			continue
		}
		out[comm] += time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
	}
	return out
}

// apiserverWrites is what kube-apiserver's /metrics says of WorkerBinding
// status PUTs so far.
type apiserverWrites struct {
	total, conflicts float64
	// durationSum and durationCount: apiserver_request_duration_seconds,
	// the time the API server took (not the client's queueing).
	durationSum, durationCount float64
}

func (w apiserverWrites) sub(o apiserverWrites) apiserverWrites {
	return apiserverWrites{w.total - o.total, w.conflicts - o.conflicts, w.durationSum - o.durationSum, w.durationCount - o.durationCount}
}

// statusWrites scrapes kube-apiserver's request counters for WorkerBinding
// status PUTs.
func statusWrites(ctx context.Context, env *testenv.Env) (apiserverWrites, error) {
	var w apiserverWrites
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return w, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return w, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.Contains(line, `resource="workerbindings"`) || !strings.Contains(line, `subresource="status"`) || !strings.Contains(line, `verb="PUT"`) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			w.total += v
			if strings.Contains(line, `code="409"`) {
				w.conflicts += v
			}
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_sum{"):
			w.durationSum += v
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_count{"):
			w.durationCount += v
		}
	}
	return w, nil
}

// gatherCounter sums a counter of the control plane's registry over the
// series whose labels include want.
func gatherCounter(b *testing.B, name string, want map[string]string) float64 {
	b.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, want) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// gatherServer summarizes the binding server's own metrics (whole run).
func gatherServer(b *testing.B) string {
	b.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, mf := range mfs {
		name := strings.TrimPrefix(mf.GetName(), "tether_binding_")
		switch mf.GetName() {
		case "tether_binding_registrations_total", "tether_binding_sessions_opened_total", "tether_binding_heartbeats_total",
			"tether_binding_heartbeats_lost_total", "tether_binding_sessions_replaced_total":
			parts = append(parts, fmt.Sprintf("%s=%.0f", name, mf.GetMetric()[0].GetCounter().GetValue()))
		case "tether_binding_refusals_total", "tether_binding_sessions_closed_total":
			var byReason []string
			for _, m := range mf.GetMetric() {
				byReason = append(byReason, fmt.Sprintf("%s:%.0f", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue()))
			}
			slices.Sort(byReason)
			parts = append(parts, fmt.Sprintf("%s={%s}", name, strings.Join(byReason, ",")))
		case "tether_job_session_connected":
			n := 0.0
			for _, m := range mf.GetMetric() {
				n += m.GetGauge().GetValue()
			}
			parts = append(parts, fmt.Sprintf("connected=%.0f", n))
		case "tether_binding_heartbeat_rtt_seconds":
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() > 0 {
				parts = append(parts, fmt.Sprintf("ping_rtt_mean=%.2fms(n=%d)", 1000*h.GetSampleSum()/float64(h.GetSampleCount()), h.GetSampleCount()))
			}
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
