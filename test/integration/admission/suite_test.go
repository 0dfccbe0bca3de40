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

func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

func consistently(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	testenv.Consistently(t, d, check)
}
