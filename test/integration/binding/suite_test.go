package binding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tether-dev/tether/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	var err error
	env, err = testenv.Start(ctx, testenv.Options{})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") == "" {
			fmt.Fprintln(os.Stderr, "SKIP integration suite:", err)
			return 0
		}
		// Under CI a missing binary is a failure, never a skip.
		fmt.Fprintln(os.Stderr, "FAIL starting the local control plane:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
		}
	}()
	return m.Run()
}

// eventually retries check until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
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

// consistently fails if check returns an error at any time during d.
func consistently(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
