package admission

import (
	"os"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/framework/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunSuite(m, &env, testenv.Options{}))
}

// eventually waits up to 15s, the one bound these tests need, for check to
// pass.
func eventually(t *testing.T, check func() error) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, check)
}

func consistently(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	testenv.Consistently(t, d, check)
}
