package benchutil

import (
	"os"
	"strconv"
	"testing"
)

// SmokeEnv names the smoke size's switch: TETHER_BENCH_SMOKE=1 (make
// bench-smoke) runs every benchmark once at a size that takes seconds, not
// minutes, so that CI keeps them runnable without timing anything.
const SmokeEnv = "TETHER_BENCH_SMOKE"

// Smoke reports whether the benchmarks run at smoke size. Each benchmark
// then shrinks its files, jobs, sessions and durations (through Size) but
// still does its whole work end to end and fails on a wrong answer as at
// full size; its figures, ratios included, are reported and mean nothing.
// A value that is not a boolean fails the benchmark.
func Smoke(tb testing.TB) bool {
	tb.Helper()
	v := os.Getenv(SmokeEnv)
	if v == "" {
		return false
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		tb.Fatalf("%s=%q: want 1 or 0", SmokeEnv, v)
	}
	return on
}

// Size is a benchmark's default for a setting: full, or smoke at smoke
// size. A TETHER_BENCH_* variable that sets it explicitly still wins.
func Size[T any](tb testing.TB, full, smoke T) T {
	tb.Helper()
	if Smoke(tb) {
		return smoke
	}
	return full
}

// NeedBinaries fails or skips a benchmark that cannot find the control
// plane's binaries (hack/testbin.sh; err from testenv.Assets): it fails in
// CI and at smoke size, where a skip would let the benchmark stop running
// unnoticed, and skips with the reason otherwise.
func NeedBinaries(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" || Smoke(tb) {
		tb.Fatal(err)
	}
	tb.Skip("the control plane's binaries are missing (make testbin, or KUBEBUILDER_ASSETS):", err)
}
