package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// env is a cluster with Tether and a pod runner; the helpers of the
// scenarios are its methods.
type env struct {
	c      *localcluster.Cluster
	tether *localcluster.Tether
	runner *localcluster.PodRunner
}

// suite is the cluster every scenario but the Trainer v2.0.0 one shares.
var suite *env

var timings struct {
	sync.Mutex
	lines []string
}

// controlPlaneArgs make the control plane's clocks short enough for a test:
// status written at most every 2s, a missing manifest reported after 20s, a
// reissued token's predecessor valid 30s (the real node's kubelet refreshes
// Secret volumes every 10s, its syncFrequency).
var controlPlaneArgs = []string{"--status-interval=2s", "--artifact-grace=20s", "--missed-heartbeats=3", "--token-overlap=30s"}

// sidecarEnv shortens the sidecar's optional sync settings (not what the
// webhook injects) so checkpoints upload within a second or two.
var sidecarEnv = []string{"TETHER_SYNC_INTERVAL=1s", "TETHER_SETTLE_TIME=1s"}

// sharedParallel is how many shared scenarios run at once unless -parallel
// says otherwise (Go's default, GOMAXPROCS, would be 2 here): all of them.
// They mostly wait (trainer steps, the kubelets' sync, the sidecars' rounds),
// so together they take about as long as the longest one.
const sharedParallel = 16

func TestMain(m *testing.M) {
	if os.Getenv("TETHER_E2E") != "1" {
		fmt.Println("e2e: skipped (set TETHER_E2E=1 or run `make e2e`; it starts a full local cluster)")
		os.Exit(0)
	}
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", fmt.Sprint(sharedParallel)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: setting -test.parallel:", err)
			os.Exit(1)
		}
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	start := time.Now()
	// The real nodes on the cluster network (r*_test.go) are on unless
	// TETHER_E2E_REAL_NODE=0.
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: true, KeepDir: os.Getenv("TETHER_E2E_KEEP") == "1", Log: logf,
		RealNode: os.Getenv("TETHER_E2E_REAL_NODE") != "0"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the local cluster:", err)
		return 1
	}
	defer func() {
		stop := time.Now()
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the local cluster:", err)
		}
		logf("cluster stopped in %.1fs", time.Since(stop).Seconds())
	}()
	logf("cluster up in %.1fs (dir %s)", time.Since(start).Seconds(), c.Dir)
	t0 := time.Now()
	// TETHER_E2E_S3=seaweedfs runs the suite against SeaweedFS instead.
	s3Impl, err := s3server.ParseImpl(os.Getenv("TETHER_E2E_S3"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: TETHER_E2E_S3:", err)
		return 1
	}
	// TETHER_E2E_S3_FAULT=random-etag runs it SSE-KMS-like (the store's
	// ETags rewritten to random hex between it and Tether: every file then
	// verified by the store's CRC-64/NVME); not run by make e2e.
	s3Fault, err := s3server.ParseFault(os.Getenv("TETHER_E2E_S3_FAULT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: TETHER_E2E_S3_FAULT:", err)
		return 1
	}
	tether, err := c.StartTether(ctx, localcluster.TetherOptions{Replicas: 2, S3: true, S3Impl: s3Impl, S3Fault: s3Fault, Args: controlPlaneArgs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting Tether:", err)
		return 1
	}
	logf("tether control plane up (2 replicas, S3 on %v, front fault %v) in %.1fs", s3Impl, s3Fault, time.Since(t0).Seconds())
	runner := c.NewPodRunner()
	runner.SidecarEnv = sidecarEnv
	runner.Plan = planFor
	// Scenario 7 checks admission only: its many pods run nothing.
	runner.Skip = func(pod *corev1.Pod) bool { return strings.HasPrefix(pod.Namespace, burstPrefix) }
	runner.Start(ctx)
	suite = &env{c: c, tether: tether, runner: runner}
	recordTiming("setup: cluster + Tether", time.Since(start))

	scenarios := time.Now()
	code := m.Run()
	phases.record(scenarios, time.Now())

	timings.Lock()
	sort.Strings(timings.lines)
	fmt.Println("e2e wall times:\n  " + strings.Join(timings.lines, "\n  "))
	timings.Unlock()
	fmt.Printf("e2e total (incl. setup, before teardown): %.1fs\n", time.Since(start).Seconds())
	return code
}

func logf(format string, args ...any) {
	fmt.Printf("[e2e %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func recordTiming(name string, d time.Duration) {
	timings.Lock()
	defer timings.Unlock()
	timings.lines = append(timings.lines, fmt.Sprintf("%-45s %6.1fs", name, d.Seconds()))
}

// timed records a scenario's wall time when it ends.
func timed(t *testing.T) {
	start := time.Now()
	t.Cleanup(func() {
		status := "ok"
		if t.Failed() {
			status = "FAILED"
		}
		recordTiming(t.Name()+" ("+status+")", time.Since(start))
	})
}
