package binding_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
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
	"github.com/gorilla/websocket"
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

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/benchutil"
	"github.com/tether-dev/tether/internal/testenv"
	"github.com/tether-dev/tether/internal/testobj"
	"github.com/tether-dev/tether/pkg/binding"
	bindingserver "github.com/tether-dev/tether/pkg/binding/server"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
	"github.com/tether-dev/tether/pkg/trainjob"
)

const (
	namespace = "bench"

	// The control plane's production settings (controlplane.DefaultOptions);
	// testenv shortens the status interval for its tests.
	statusInterval   = 30 * time.Second
	missedHeartbeats = 3

	// createWorkers bounds the objects created concurrently.
	createWorkers = 16
	// wantNofile is the RLIMIT_NOFILE both processes ask for.
	wantNofile = 65536

	// loadgenEnv, when set to a config file, turns the test binary into the
	// load generator (see TestMain).
	loadgenEnv = "TETHER_BENCH_LOADGEN_CONFIG"
	// eventPrefix marks the generator's stdout lines addressed to the
	// benchmark: "<prefix><name> <json>".
	eventPrefix = "@tether-loadgen "
)

// Targets, reported next to the figures, never asserted.
const (
	targetSessions   = 10000
	targetCores      = 0.5
	targetKiBSession = 40.0
	targetAckP99ms   = 20.0
	targetWritesPerS = 20.0
)

// TestMain runs the load generator instead of the tests when the benchmark
// re-executes the test binary for it.
func TestMain(m *testing.M) {
	if path := os.Getenv(loadgenEnv); path != "" {
		os.Exit(runLoadGenerator(path))
	}
	os.Exit(m.Run())
}

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

// identity is one worker: its token and the objects that make it valid.
type identity struct {
	Token     string `json:"token"`
	Binding   string `json:"binding"`
	JobID     string `json:"jobID"`
	WorkerID  string `json:"workerID"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	UID       string `json:"uid"`
}

// BenchmarkBindingSessions holds N sidecar sessions on one control-plane
// replica and measures what they cost it; see the package documentation.
// It runs once whatever b.N is: use -benchtime 1x.
func BenchmarkBindingSessions(b *testing.B) {
	cfg := loadConfig(b)
	nofile, nofileNote := raiseNofile()
	progressf("RLIMIT_NOFILE of the server process: %d (%s)", nofile, nofileNote)
	if need := uint64(cfg.sessions) + 1000; nofile < need {
		b.Logf("WARNING: %d sessions need about %d descriptors in each process; expect dial failures past ~%d sessions",
			cfg.sessions, need, nofile-1000)
	}
	// The control plane's production logger (cmd/webhook: zap, JSON, info),
	// writing nowhere: its log calls cost what they cost in production.
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	ctx := b.Context()

	if _, err := testenv.Assets(); err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatal(err)
		}
		b.Skip(err)
	}
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
	lg.await(b, "hold-start", 2*time.Minute+maxSettle, nil)
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

	var res loadgenResult
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
		leaseAge, bindingserver.DefaultReplicaLeaseDuration*2/3)
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
			if err := env.Client.List(ctx, leases, client.MatchingLabels{bindingserver.ReplicaLeaseLabel: "true"}); err == nil {
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
	tc, err := tlsConfig(env.CAFile)
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
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: "tether-system", Name: "tether-control-plane.tether.dev"}, lease)
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
func createObjects(b *testing.B, ctx context.Context, env *testenv.Env, n int) []identity {
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
	ids := make([]identity, n)
	for i := range ids {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("job-%d", i)
		ids[i] = identity{Token: hex.EncodeToString(raw[:]), Binding: name, JobID: uuid.NewString(), WorkerID: uuid.NewString(),
			Namespace: namespace, Pod: name + "-node-0-0"}
	}

	err := parallel(ctx, "pods", n, createWorkers, func(i int) error {
		id := &ids[i]
		status := mutate.InjectionStatus{Version: mutate.StatusVersion, JobID: id.JobID, WorkerID: id.WorkerID,
			Sidecar: mutate.SidecarName, ArtifactVolume: mutate.ArtifactVolumeName}.String()
		pod := testobj.MakeTrainerPod(id.Binding, namespace).Routed().Name(id.Pod).Annotation(jobconfig.PodStatusAnnotation, status).Obj()
		err := retryCreate(ctx, func() error { return c.Create(ctx, pod) })
		if apierrors.IsAlreadyExists(err) { // created by an attempt whose answer was lost
			err = c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: id.Pod}, pod)
		}
		if err != nil {
			return err
		}
		// The pod webhook (failurePolicy Fail) was called; with no TrainJob it
		// must leave the pod alone.
		if len(pod.Spec.InitContainers) != 0 || pod.Annotations[jobconfig.PodStatusAnnotation] != status {
			return fmt.Errorf("pod %s was changed at admission: init containers %d, %s=%q", pod.Name,
				len(pod.Spec.InitContainers), jobconfig.PodStatusAnnotation, pod.Annotations[jobconfig.PodStatusAnnotation])
		}
		id.UID = string(pod.UID)
		return nil
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
			ObjectMeta: metav1.ObjectMeta{Name: id.Binding, Namespace: namespace, Labels: map[string]string{jobconfig.BindLabel: jobconfig.BindValue},
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
func waitForCache(b *testing.B, ctx context.Context, env *testenv.Env, ids []identity, workers int) {
	b.Helper()
	hc, err := httpsClient(env.CAFile, workers)
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
			req.Header = sessionHeader(id)
			req.Header.Set(binding.HeaderWorkerID, "bench-cache-probe")
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

func httpsClient(caFile string, conns int) (*http.Client, error) {
	tc, err := tlsConfig(caFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tc, MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		IdleConnTimeout: time.Minute, DisableCompression: true,
	}}, nil
}

func tlsConfig(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// sessionHeader is what a sidecar sends with GET /v1/session.
func sessionHeader(id identity) http.Header {
	h := http.Header{}
	h.Set(binding.HeaderAuthorization, "Bearer "+id.Token)
	h.Set(binding.HeaderProtocolVersion, binding.ProtocolVersion)
	h.Set(binding.HeaderJobID, id.JobID)
	h.Set(binding.HeaderWorkerID, id.WorkerID)
	h.Set(binding.HeaderPodName, id.Pod)
	h.Set(binding.HeaderPodUID, id.UID)
	return h
}

// ---- The benchmark's side of the load generator ----

// loadgenConfig is what the benchmark hands the generator, as a JSON file.
type loadgenConfig struct {
	ServerURL  string    `json:"serverURL"`
	CAFile     string    `json:"caFile"`
	Identities string    `json:"identities"`
	Result     string    `json:"result"`
	Hold       string    `json:"hold"`
	Dialers    int       `json:"dialers"`
	DialRate   int       `json:"dialRate"`
	Registrars int       `json:"registrars"`
	Deadline   time.Time `json:"deadline"`
	// Trace is where the generator writes its execution trace of the
	// measured phase ("": none).
	Trace string `json:"trace,omitempty"`
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

func startLoadGenerator(b *testing.B, env *testenv.Env, ids []identity, cfg benchConfig, dir string) *loadgen {
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
	lc := loadgenConfig{ServerURL: env.BindingURL, CAFile: env.CAFile, Identities: idPath, Result: result,
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

	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), loadgenEnv+"="+cfgPath)
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
			rest, ok := strings.CutPrefix(line, eventPrefix)
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

// raiseNofile raises RLIMIT_NOFILE to wantNofile, or as far as the hard
// limit allows without CAP_SYS_RESOURCE, and returns the soft limit.
func raiseNofile() (uint64, string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err.Error()
	}
	if lim.Cur >= wantNofile {
		return lim.Cur, "already high enough"
	}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: wantNofile, Max: max(wantNofile, lim.Max)})
	if err == nil {
		return wantNofile, "raised"
	}
	note := fmt.Sprintf("raising to %d: %v; soft limit set to the hard limit", wantNofile, err)
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim.Max, Max: lim.Max})
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur, note
}

// ---- The load generator (a separate process) ----

// loadgenResult is what the generator reports at the end.
type loadgenResult struct {
	Sessions   int    `json:"sessions"`
	Nofile     uint64 `json:"nofile"`
	NofileNote string `json:"nofileNote"`

	Registered      int            `json:"registered"`
	RegisterFailed  int            `json:"registerFailed"`
	RegisterSeconds float64        `json:"registerSeconds"`
	RegisterErrors  map[string]int `json:"registerErrors"`

	Established      int            `json:"established"`
	DialFailed       int            `json:"dialFailed"`
	EstablishSeconds float64        `json:"establishSeconds"`
	DialErrors       map[string]int `json:"dialErrors"`

	HeartbeatInterval string  `json:"heartbeatInterval"`
	HoldSeconds       float64 `json:"holdSeconds"`
	// Held: sessions open from the start to the end of the measured phase.
	Held             int            `json:"held"`
	ClosedDuringHold int            `json:"closedDuringHold"`
	CloseCodes       map[string]int `json:"closeCodes"` // sessions the server or the network ended

	// Heartbeats sent in the measured phase, and what became of them.
	HeartbeatsSent int64 `json:"heartbeatsSent"`
	Acks           int64 `json:"acks"`
	// Unanswered: no ack by the time the benchmark finished measuring
	// (at least a few seconds after the phase); their latency enters the
	// percentiles as that lower bound. Late: acked after the next heartbeat
	// of the session was sent (more than one interval).
	Unanswered int64 `json:"unanswered"`
	Late       int64 `json:"late"`
	// Skipped: acks that never came although a later heartbeat's did.
	Skipped int64 `json:"skipped"`
	// StaleAcks: acks for no heartbeat awaiting one (a bug, if any).
	StaleAcks      int64 `json:"staleAcks"`
	NonRunningAcks int64 `json:"nonRunningAcks"`
	// SettleSeconds is how long after the warm-up interval the last
	// session's Running transition took; NotRunningAtStart counts those
	// still not acked Running when the hold started anyway.
	SettleSeconds     float64 `json:"settleSeconds"`
	NotRunningAtStart int     `json:"notRunningAtStart"`
	SendErrors        int64   `json:"sendErrors"`
	UnexpectedFrames  int64   `json:"unexpectedFrames"`

	Latency  percentiles `json:"ackLatencyMs"`
	FirstAck percentiles `json:"firstAckLatencyMs"` // sessions' first heartbeats, while opening
	SendLag  percentiles `json:"sendLagMs"`

	CPUSeconds float64 `json:"cpuSeconds"`
	CPUCores   float64 `json:"cpuCores"`

	Fatal string `json:"fatal,omitempty"`
}

type percentiles struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func summarize(d []time.Duration) percentiles {
	slices.Sort(d)
	p := func(q float64) float64 {
		if len(d) == 0 {
			return 0
		}
		k := int(math.Ceil(q*float64(len(d)))) - 1
		return float64(d[max(0, min(k, len(d)-1))]) / float64(time.Millisecond)
	}
	return percentiles{N: len(d), P50: p(0.5), P90: p(0.9), P99: p(0.99), P999: p(0.999), Max: p(1)}
}

func emit(name string, v any) {
	raw, _ := json.Marshal(v)
	fmt.Fprintf(os.Stdout, "%s%s %s\n", eventPrefix, name, raw)
}

func genLogf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s loadgen: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// runLoadGenerator is the generator's main; it returns the exit code.
func runLoadGenerator(path string) int {
	res := &loadgenResult{}
	fail := func(format string, args ...any) int {
		res.Fatal = fmt.Sprintf(format, args...)
		emit("fatal", res.Fatal)
		return 1
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fail("%v", err)
	}
	var cfg loadgenConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fail("%s: %v", path, err)
	}
	hold, err := time.ParseDuration(cfg.Hold)
	if err != nil {
		return fail("hold: %v", err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), cfg.Deadline)
	defer cancel()
	res.Nofile, res.NofileNote = raiseNofile()

	ids, err := readIdentities(cfg.Identities)
	if err != nil {
		return fail("%v", err)
	}
	res.Sessions = len(ids)
	tc, err := tlsConfig(cfg.CAFile)
	if err != nil {
		return fail("%v", err)
	}
	// The benchmark talks through stdin; EOF means it is gone.
	ctl := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ctl <- strings.TrimSpace(sc.Text())
		}
		close(ctl)
	}()
	awaitCtl := func(want string, timeout time.Duration) error {
		select {
		case msg, ok := <-ctl:
			if !ok {
				return errors.New("the benchmark closed stdin")
			}
			if msg != want {
				return fmt.Errorf("got %q from the benchmark, want %q", msg, want)
			}
			return nil
		case <-time.After(timeout):
			return fmt.Errorf("no %q from the benchmark within %s", want, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	g := newGenerator(cfg, tc, ids)
	defer g.closeAll()

	// 1. Register every worker.
	g.register(ctx, res)
	emit("registered", map[string]any{"registered": res.Registered, "failed": res.RegisterFailed, "seconds": res.RegisterSeconds})
	if err := awaitCtl("go", 10*time.Minute); err != nil {
		return fail("%v", err)
	}

	// 2. Open the sessions; heartbeats start on the schedule at once.
	g.startSenders(ctx)
	g.dial(ctx, res)
	emit("established", map[string]any{"established": res.Established, "failed": res.DialFailed, "seconds": res.EstablishSeconds})
	if res.Established == 0 {
		return fail("no session established: %v", res.DialErrors)
	}

	// 3. Warm up until every session has sent its first heartbeat (which
	// writes Registered -> Running) and an ack says that write was made
	// (a server that queues its writes acks before it writes), at most
	// maxSettle more; then hold. The measured phase is the steady state of
	// sessions that only heartbeat, not the ramp's transitions.
	holdStart := time.Unix(0, g.lastOpen.Load()).Add(g.interval + time.Second)
	if err := credentials.Sleep(ctx, time.Until(holdStart)); err != nil {
		return fail("%v", err)
	}
	settleStart := time.Now()
	for {
		open, running := g.runningSessions()
		if running >= open || time.Since(settleStart) > maxSettle {
			res.SettleSeconds, res.NotRunningAtStart = time.Since(settleStart).Seconds(), open-running
			genLogf("%d of %d open sessions acked Running after %.1fs more", running, open, res.SettleSeconds)
			break
		}
		if err := credentials.Sleep(ctx, time.Second); err != nil {
			return fail("%v", err)
		}
	}
	holdStart = time.Now()
	g.holdStart.Store(holdStart.UnixNano())
	cpu0 := benchutil.ProcessCPU()
	openAtStart := g.openSessions()
	stopTrace := func() {}
	if cfg.Trace != "" {
		if f, err := os.Create(cfg.Trace); err != nil {
			genLogf("trace: %v", err)
		} else if err := trace.Start(f); err != nil {
			genLogf("trace: %v", err)
			_ = f.Close()
		} else {
			stopTrace = func() { trace.Stop(); _ = f.Close() }
		}
	}
	emit("hold-start", map[string]any{"open": openAtStart})
	genLogf("measured phase started with %d open sessions", openAtStart)
	if err := credentials.Sleep(ctx, hold); err != nil {
		return fail("%v", err)
	}
	stopTrace()
	holdEnd := time.Now()
	g.holdEnd.Store(holdEnd.UnixNano())
	res.CPUSeconds = (benchutil.ProcessCPU() - cpu0).Seconds()
	res.HoldSeconds = holdEnd.Sub(holdStart).Seconds()
	res.CPUCores = res.CPUSeconds / res.HoldSeconds
	res.Held, res.ClosedDuringHold = g.held(holdStart, holdEnd)
	emit("hold-end", map[string]any{"held": res.Held})

	// 4. Keep the sessions (and heartbeats) up while the benchmark measures.
	if err := awaitCtl("done", 10*time.Minute); err != nil {
		return fail("%v", err)
	}
	g.stopSenders()
	g.finish(res)
	g.closeAll()

	out, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(cfg.Result, out, 0o600); err != nil {
		genLogf("writing %s: %v", cfg.Result, err)
	}
	emit("result", res)
	return 0
}

func readIdentities(path string) ([]identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []identity
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var id identity
		if err := dec.Decode(&id); errors.Is(err, io.EOF) {
			return ids, nil
		} else if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
}

// worker is one simulated sidecar.
type worker struct {
	id   identity
	conn *websocket.Conn // set once by the dialer before alive
	// seq is the last heartbeat sequence number; only the worker's sender
	// goroutine touches it after registration.
	seq uint64

	alive atomic.Bool
	// running is set by the first ack that says Running: the server has
	// written the session's Registered -> Running transition.
	running  atomic.Bool
	openedAt atomic.Int64 // UnixNano
	closedAt atomic.Int64 // UnixNano; 0 while open
	// pending are the heartbeats awaiting their acks, oldest first (the
	// server answers a session's heartbeats in order).
	mu      sync.Mutex
	pending []sentHeartbeat
}

type sentHeartbeat struct {
	seq  uint64
	sent int64 // UnixNano
}

type generator struct {
	cfg      loadgenConfig
	tls      *tls.Config
	workers  []*worker
	interval time.Duration
	senders  int

	lastOpen           atomic.Int64
	holdStart, holdEnd atomic.Int64 // UnixNano; 0 until set
	closing            atomic.Bool  // our own shutdown: ends are not counted

	stopSend  context.CancelFunc
	sendersWG sync.WaitGroup

	mu        sync.Mutex
	latencies []time.Duration // heartbeat -> ack, heartbeats sent in the measured phase
	sendLags  []time.Duration // schedule -> send, measured phase
	firstAcks []time.Duration // first heartbeat of a session -> ack (includes the Running write)
	closes    map[string]int

	sent, acks, late, skipped, stale, nonRunning, sendErrors, unexpected atomic.Int64
}

func newGenerator(cfg loadgenConfig, tc *tls.Config, ids []identity) *generator {
	g := &generator{cfg: cfg, tls: tc, interval: jobconfig.DefaultHeartbeatInterval, closes: map[string]int{}}
	g.workers = make([]*worker, len(ids))
	for i, id := range ids {
		g.workers[i] = &worker{id: id}
	}
	g.senders = min(8, len(ids))
	return g
}

// maxSettle bounds the wait for every session's Running transition.
const maxSettle = 3 * time.Minute

// runningSessions counts the open sessions and those acked Running.
func (g *generator) runningSessions() (open, running int) {
	for _, w := range g.workers {
		if w.alive.Load() {
			open++
			if w.running.Load() {
				running++
			}
		}
	}
	return open, running
}

func (g *generator) inHold(t int64) bool {
	hs, he := g.holdStart.Load(), g.holdEnd.Load()
	return hs != 0 && t >= hs && (he == 0 || t < he)
}

// register POSTs every worker's registration, cfg.Registrars at a time
// over keep-alive connections, retrying what the server says to retry.
func (g *generator) register(ctx context.Context, res *loadgenResult) {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: g.tls.Clone(), MaxIdleConns: g.cfg.Registrars, MaxIdleConnsPerHost: g.cfg.Registrars,
		MaxConnsPerHost: g.cfg.Registrars, DisableCompression: true, IdleConnTimeout: time.Minute,
	}}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	errs := map[string]int{}
	var intervals sync.Map
	var next, ok, failed atomic.Int64
	start := time.Now()
	stop := ticker(5*time.Second, func() {
		genLogf("registered %d/%d (%.0f/s), %d failed", ok.Load(), len(g.workers), float64(ok.Load())/time.Since(start).Seconds(), failed.Load())
	})
	var wg sync.WaitGroup
	for range g.cfg.Registrars {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(g.workers) {
					return
				}
				w := g.workers[i]
				resp, err := g.registerOne(ctx, hc, w.id)
				if err != nil {
					failed.Add(1)
					mu.Lock()
					errs[errKey(err)]++
					mu.Unlock()
					continue
				}
				w.seq = resp.LastSeq
				intervals.Store(resp.HeartbeatInterval.Duration, true)
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	stop()
	intervals.Range(func(k, _ any) bool {
		g.interval = k.(time.Duration) // all the same: no TrainJob, the default
		return true
	})
	res.Registered, res.RegisterFailed = int(ok.Load()), int(failed.Load())
	res.RegisterSeconds = time.Since(start).Seconds()
	res.RegisterErrors = errs
	res.HeartbeatInterval = g.interval.String()
	genLogf("registered %d workers in %.1fs (%.0f/s), %d failed %v; heartbeat interval %s",
		res.Registered, res.RegisterSeconds, float64(res.Registered)/res.RegisterSeconds, res.RegisterFailed, errs, g.interval)
}

type httpError struct {
	status int
	body   string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.status, e.body) }

func errKey(err error) string {
	var he *httpError
	if errors.As(err, &he) {
		return "HTTP " + strconv.Itoa(he.status)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return "too many open files"
	}
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

func (g *generator) registerOne(ctx context.Context, hc *http.Client, id identity) (*binding.RegisterResponse, error) {
	body, err := json.Marshal(binding.RegisterRequest{JobID: id.JobID, WorkerID: id.WorkerID, SidecarVersion: "bench",
		Pod: binding.PodIdentity{Namespace: id.Namespace, Name: id.Pod, UID: id.UID, Node: "bench-node"}})
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := range 5 {
		if attempt > 0 {
			if err := credentials.Sleep(ctx, time.Duration(200<<attempt)*time.Millisecond); err != nil {
				return nil, err
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.ServerURL+binding.PathRegister, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set(binding.HeaderAuthorization, "Bearer "+id.Token)
		req.Header.Set(binding.HeaderProtocolVersion, binding.ProtocolVersion)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			lastErr = err
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if err != nil {
			lastErr = err
			continue
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			lastErr = &httpError{resp.StatusCode, string(raw)}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return nil, &httpError{resp.StatusCode, string(raw)}
		}
		var rr binding.RegisterResponse
		if err := json.Unmarshal(raw, &rr); err != nil {
			return nil, err
		}
		return &rr, nil
	}
	return nil, lastErr
}

// dial opens every registered worker's session, cfg.Dialers at a time.
func (g *generator) dial(ctx context.Context, res *loadgenResult) {
	u := "wss" + strings.TrimPrefix(g.cfg.ServerURL, "https") + binding.PathSession
	d := &websocket.Dialer{TLSClientConfig: g.tls.Clone(), HandshakeTimeout: 15 * time.Second, ReadBufferSize: 1024, WriteBufferSize: 1024}
	var mu sync.Mutex
	errs := map[string]int{}
	var next, ok, failed atomic.Int64
	start := time.Now()
	stop := ticker(5*time.Second, func() {
		genLogf("sessions open %d/%d (%.0f/s), %d failed", ok.Load(), len(g.workers), float64(ok.Load())/time.Since(start).Seconds(), failed.Load())
	})
	var wg sync.WaitGroup
	for range g.cfg.Dialers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(g.workers) {
					return
				}
				w := g.workers[i]
				if w.id.UID == "" {
					continue
				}
				if r := g.cfg.DialRate; r > 0 {
					_ = credentials.Sleep(ctx, time.Until(start.Add(time.Duration(i)*time.Second/time.Duration(r))))
				}
				var err error
				for attempt := range 3 {
					if attempt > 0 {
						_ = credentials.Sleep(ctx, time.Duration(attempt)*time.Second)
					}
					var conn *websocket.Conn
					var resp *http.Response
					conn, resp, err = d.DialContext(ctx, u, sessionHeader(w.id))
					if err == nil {
						w.conn = conn
						if err = g.firstHeartbeat(w); err != nil {
							_ = conn.Close()
							break
						}
						now := time.Now().UnixNano()
						w.openedAt.Store(now)
						w.alive.Store(true)
						g.lastOpen.Store(now)
						go g.read(w)
						break
					}
					if resp != nil {
						raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
						_ = resp.Body.Close()
						err = &httpError{resp.StatusCode, string(raw)}
						if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusConflict {
							break
						}
					}
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					errs[errKey(err)]++
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	stop()
	res.Established, res.DialFailed = int(ok.Load()), int(failed.Load())
	res.EstablishSeconds = time.Since(start).Seconds()
	res.DialErrors = errs
	genLogf("%d sessions open in %.1fs (%.0f/s), %d failed %v", res.Established, res.EstablishSeconds,
		float64(res.Established)/res.EstablishSeconds, res.DialFailed, errs)
}

// firstHeartbeat sends a new session's first heartbeat and waits for its
// ack, as a sidecar's first heartbeat follows the handshake at once. The
// server writes the binding's status (Registered -> Running) before it
// acks, so the dialers open sessions no faster than the API server takes
// those writes: an open-loop ramp of thousands of sessions a second queues
// thousands of writes (see the package documentation).
func (g *generator) firstHeartbeat(w *worker) error {
	conn := w.conn
	w.seq++
	start := time.Now()
	_ = conn.SetWriteDeadline(start.Add(5 * time.Second))
	if err := conn.WriteMessage(websocket.TextMessage, appendHeartbeat(nil, w.seq, start)); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(start.Add(30 * time.Second))
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return err
		}
		f, err := binding.DecodeFrame(data)
		if err != nil {
			return err
		}
		if f.Type == binding.FrameAck && f.Ack.Seq == w.seq {
			g.mu.Lock()
			g.firstAcks = append(g.firstAcks, time.Since(start))
			g.mu.Unlock()
			return nil
		}
	}
}

func ticker(every time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { close(done) }
}

var ackPrefix = []byte(`{"type":"ack","ack":{"seq":`)

// read is the session's one reader goroutine: acks are matched to the
// pending heartbeat; pings are answered by gorilla's default handler.
func (g *generator) read(w *worker) {
	conn := w.conn
	conn.SetReadLimit(binding.MaxFrameSize)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(time.Duration(missedHeartbeats)*g.interval + 10*time.Second))
		_, data, err := conn.ReadMessage()
		if err != nil {
			g.ended(w, err)
			return
		}
		now := time.Now().UnixNano()
		var seq uint64
		var running bool
		if rest, ok := bytes.CutPrefix(data, ackPrefix); ok {
			end := bytes.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
			if end <= 0 {
				g.unexpected.Add(1)
				continue
			}
			seq, _ = strconv.ParseUint(string(rest[:end]), 10, 64)
			running = bytes.Contains(rest, []byte(`"phase":"Running"`))
		} else {
			f, err := binding.DecodeFrame(data)
			if err != nil || f.Type != binding.FrameAck {
				g.unexpected.Add(1)
				continue
			}
			seq, running = f.Ack.Seq, f.Ack.Phase == string(tetherv1.PhaseRunning)
		}
		if running {
			w.running.Store(true)
		}
		var hb sentHeartbeat
		late, skipped := false, 0
		w.mu.Lock()
		for len(w.pending) > 0 && w.pending[0].seq < seq {
			w.pending = w.pending[1:]
			skipped++
		}
		if len(w.pending) > 0 && w.pending[0].seq == seq {
			hb, late = w.pending[0], len(w.pending) > 1
			w.pending = w.pending[1:]
		}
		w.mu.Unlock()
		if skipped > 0 {
			g.skipped.Add(int64(skipped))
		}
		if hb.seq == 0 {
			g.stale.Add(1)
			continue
		}
		if !g.inHold(hb.sent) {
			continue
		}
		g.acks.Add(1)
		if late {
			g.late.Add(1)
		}
		if !running {
			g.nonRunning.Add(1)
		}
		g.mu.Lock()
		g.latencies = append(g.latencies, time.Duration(now-hb.sent))
		g.mu.Unlock()
	}
}

func (g *generator) ended(w *worker, err error) {
	w.alive.Store(false)
	w.closedAt.Store(time.Now().UnixNano())
	if g.closing.Load() {
		return
	}
	var ce *websocket.CloseError
	var ne net.Error
	key := "error"
	switch {
	case errors.As(err, &ce):
		key = "close " + strconv.Itoa(ce.Code)
	case errors.As(err, &ne) && ne.Timeout():
		key = "read timeout"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		key = "eof"
	}
	g.mu.Lock()
	g.closes[key]++
	g.mu.Unlock()
}

func (g *generator) openSessions() int {
	n := 0
	for _, w := range g.workers {
		if w.alive.Load() {
			n++
		}
	}
	return n
}

// held counts the sessions open through [start, end), and those that were
// open at start and ended within it.
func (g *generator) held(start, end time.Time) (held, closed int) {
	s, e := start.UnixNano(), end.UnixNano()
	for _, w := range g.workers {
		o := w.openedAt.Load()
		if o == 0 || o > s {
			continue
		}
		switch c := w.closedAt.Load(); {
		case c == 0 || c >= e:
			held++
		case c >= s:
			closed++
		}
	}
	return held, closed
}

// startSenders starts the shared heartbeat scheduler: g.senders goroutines,
// sender k owning workers k, k+senders, ... Worker i heartbeats at
// t0 + i*interval/n + r*interval (r = 0, 1, ...), so the load is spread
// evenly over the interval; a worker whose session is not open yet skips
// its slot.
func (g *generator) startSenders(ctx context.Context) {
	ctx, g.stopSend = context.WithCancel(ctx)
	t0 := time.Now()
	n := len(g.workers)
	for k := range g.senders {
		g.sendersWG.Go(func() {
			buf := make([]byte, 0, 512)
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for r := 0; ; r++ {
				for i := k; i < n; i += g.senders {
					due := t0.Add(time.Duration(r)*g.interval + time.Duration(int64(i)*int64(g.interval)/int64(n)))
					if wait := time.Until(due); wait > 0 {
						timer.Reset(wait)
						select {
						case <-ctx.Done():
							return
						case <-timer.C:
						}
					} else if ctx.Err() != nil {
						return
					}
					w := g.workers[i]
					if !w.alive.Load() {
						continue
					}
					buf = g.heartbeat(w, buf, due)
				}
			}
		})
	}
}

func (g *generator) stopSenders() {
	if g.stopSend != nil {
		g.stopSend()
		g.sendersWG.Wait()
	}
}

// heartbeat sends w's next heartbeat; progress makes it look like a real
// sidecar's with a progress file.
func (g *generator) heartbeat(w *worker, buf []byte, due time.Time) []byte {
	w.seq++
	now := time.Now()
	ts := now.UnixNano()
	buf = appendHeartbeat(buf[:0], w.seq, now)
	w.mu.Lock()
	w.pending = append(w.pending, sentHeartbeat{seq: w.seq, sent: ts})
	w.mu.Unlock()
	if g.inHold(ts) {
		g.sent.Add(1)
		g.mu.Lock()
		g.sendLags = append(g.sendLags, now.Sub(due))
		g.mu.Unlock()
	}
	_ = w.conn.SetWriteDeadline(now.Add(5 * time.Second))
	if err := w.conn.WriteMessage(websocket.TextMessage, buf); err != nil {
		g.sendErrors.Add(1)
		_ = w.conn.Close() // the reader records the end
	}
	return buf
}

func appendHeartbeat(b []byte, seq uint64, now time.Time) []byte {
	b = append(b, `{"type":"heartbeat","heartbeat":{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"sentAt":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","progress":{"step":`...)
	b = strconv.AppendUint(b, 100*seq, 10)
	b = append(b, `,"epoch":1.5,"loss":0.2345,"fraction":0.42,"updatedAt":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339)
	b = append(b, `"},"uploadedBytes":`...)
	b = strconv.AppendUint(b, 1<<20*seq, 10)
	return append(b, `}}`...)
}

// finish fills in the measured phase's results.
func (g *generator) finish(res *loadgenResult) {
	now := time.Now().UnixNano()
	var unanswered []time.Duration
	for _, w := range g.workers {
		w.mu.Lock()
		for _, hb := range w.pending {
			if g.inHold(hb.sent) {
				unanswered = append(unanswered, time.Duration(now-hb.sent))
			}
		}
		w.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	res.HeartbeatsSent, res.Acks, res.Unanswered, res.Late = g.sent.Load(), g.acks.Load(), int64(len(unanswered)), g.late.Load()
	res.Skipped, res.StaleAcks = g.skipped.Load(), g.stale.Load()
	g.latencies = append(g.latencies, unanswered...)
	res.NonRunningAcks, res.SendErrors, res.UnexpectedFrames = g.nonRunning.Load(), g.sendErrors.Load(), g.unexpected.Load()
	res.Latency, res.SendLag, res.FirstAck = summarize(g.latencies), summarize(g.sendLags), summarize(g.firstAcks)
	res.CloseCodes = maps.Clone(g.closes)
}

// closeAll ends every session with a normal closure.
func (g *generator) closeAll() {
	if g.closing.Swap(true) {
		return
	}
	g.stopSenders()
	deadline := time.Now().Add(time.Second)
	for _, w := range g.workers {
		if w.alive.Load() {
			_ = w.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "benchmark done"), deadline)
		}
	}
	time.Sleep(500 * time.Millisecond)
	for _, w := range g.workers {
		if w.conn != nil {
			_ = w.conn.Close()
		}
	}
}

// Sanity check, run by go test ./bench/binding/ without -bench: the
// generator's hand-built heartbeat is a valid frame.
func TestHeartbeatFrame(t *testing.T) {
	f, err := binding.DecodeFrame(appendHeartbeat(nil, 42, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != binding.FrameHeartbeat || f.Heartbeat.Seq != 42 || f.Heartbeat.Progress == nil || *f.Heartbeat.Progress.Step != 4200 {
		t.Fatalf("unexpected frame %+v", f)
	}
}
