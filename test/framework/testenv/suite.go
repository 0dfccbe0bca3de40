package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// The helpers take these interfaces, not the testing package's types
// (*testing.M, *testing.T and testing.TB satisfy them): testenv is linked
// by the local cluster and so by cmd/tether-demo, which must not link the
// testing package (internal/archtest).

// Runner is what RunSuite needs of a *testing.M.
type Runner interface{ Run() int }

// TB is what the helpers here need of a test.
type TB interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// RunSuite starts a local control plane for a test package's TestMain, runs
// its tests and stops it. Without the binaries the suite is skipped, except
// under CI (CI set), where that is a failure.
func RunSuite(m Runner, env **Env, opts Options) int {
	var err error
	*env, err = Start(context.Background(), opts)
	if err != nil {
		if errors.Is(err, ErrNoAssets) && os.Getenv("CI") == "" {
			fmt.Fprintln(os.Stderr, "SKIP integration suite:", err)
			return 0
		}
		fmt.Fprintln(os.Stderr, "FAIL starting the local control plane:", err)
		return 1
	}
	defer func() {
		if err := (*env).Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
		}
	}()
	return m.Run()
}

// StartForTest starts a control plane for one test and stops it when the
// test ends; it skips or fails as RunSuite does.
func StartForTest(t TB, opts Options) *Env {
	t.Helper()
	env, err := Start(context.Background(), opts)
	if err != nil {
		if errors.Is(err, ErrNoAssets) && os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

// Eventually retries check until it returns nil or timeout passes.
func Eventually(t TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Consistently fails if check returns an error at any time during d.
func Consistently(t TB, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
