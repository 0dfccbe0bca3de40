package tuning

import (
	"context"
	"os"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	// Linked as the control plane links it: its init registers the Go
	// collector, go_gc_gomemlimit_bytes with it, with ctrlmetrics.Registry.
	_ "sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// TestGoMemoryLimitFollowsTheContainerLimit: the runtime's soft limit is
// MemoryLimitRatio of the container's limit, follows a change of it (an
// in-place resize), and is what /metrics says (go_gc_gomemlimit_bytes, from
// controller-runtime's registry) - where an operator, and test/install,
// see it.
func TestGoMemoryLimitFollowsTheContainerLimit(t *testing.T) {
	if v, ok := os.LookupEnv("AUTOMEMLIMIT"); ok {
		t.Skipf("AUTOMEMLIMIT=%s is set in this environment", v)
	}
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); time.Sleep(50 * time.Millisecond); debug.SetMemoryLimit(before) })

	var container atomic.Uint64
	container.Store(512 << 20)
	got := followMemoryLimit(ctx, logr.Discard(), func() (uint64, error) { return container.Load(), nil }, 20*time.Millisecond)
	ratio := MemoryLimitRatio // not a constant expression: memlimit truncates
	want := int64(float64(512<<20) * ratio)
	if got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("limit set %d, runtime's %d; want %d (%.0f%% of 512Mi)", got, debug.SetMemoryLimit(-1), want, MemoryLimitRatio*100)
	}
	if m := gomemlimitMetric(t); m != float64(want) {
		t.Errorf("go_gc_gomemlimit_bytes = %.0f, want %d", m, want)
	}

	container.Store(640 << 20) // limits.memory resized in place
	want = int64(float64(640<<20) * ratio)
	deadline := time.Now().Add(5 * time.Second)
	for debug.SetMemoryLimit(-1) != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := debug.SetMemoryLimit(-1); got != want {
		t.Fatalf("after the resize the runtime's limit is %d, want %d", got, want)
	}
	if m := gomemlimitMetric(t); m != float64(want) {
		t.Errorf("after the resize go_gc_gomemlimit_bytes = %.0f, want %d", m, want)
	}
}

// TestGoMemoryLimitExplicitWins: GOMEMLIMIT set by the operator is kept.
func TestGoMemoryLimitExplicitWins(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "300MiB")
	before := debug.SetMemoryLimit(300 << 20)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	if got := followMemoryLimit(context.Background(), logr.Discard(), func() (uint64, error) { return 1 << 30, nil }, 0); got != 300<<20 {
		t.Errorf("limit %d, want the explicit 300MiB", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 300<<20 {
		t.Errorf("runtime's limit %d, want the explicit 300MiB", got)
	}
}

func gomemlimitMetric(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "go_gc_gomemlimit_bytes" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("controller-runtime's registry has no go_gc_gomemlimit_bytes")
	return 0
}
