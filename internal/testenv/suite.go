package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// RunSuite starts a local control plane for a test package's TestMain, runs
// its tests and stops it. Without the binaries the suite is skipped, except
// under CI (CI set), where that is a failure.
func RunSuite(m *testing.M, env **Env, opts Options) int {
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
func StartForTest(t *testing.T, opts Options) *Env {
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
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
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
func Consistently(t testing.TB, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
