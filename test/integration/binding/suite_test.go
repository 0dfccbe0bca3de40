package binding

import (
	"os"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/test/framework/testenv"
)

const tokenOverlap = 5 * time.Second

var env *testenv.Env

func TestMain(m *testing.M) {
	// A short token overlap, so the reissue test sees it end.
	os.Exit(testenv.RunSuite(m, &env, testenv.Options{ControlPlane: func(o *controlplane.Options) { o.TokenOverlap = tokenOverlap }}))
}

func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

func consistently(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	testenv.Consistently(t, d, check)
}
