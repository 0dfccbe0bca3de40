package install

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/framework/localcluster"
)

// cluster is the installed cluster every test of the package shares.
var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	if os.Getenv("TETHER_E2E") != "1" {
		fmt.Println("install: skipped (set TETHER_E2E=1 or run `make e2e`; it starts a full local cluster with two real nodes, as root)")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "install: the real nodes need root (network namespaces, cgroups): run as root, or unset TETHER_E2E")
		return 1
	}
	ctx := context.Background()
	start := time.Now()
	// FastNodeLoss: TestNodeLossDuringTwoNodeJob (the package's last test,
	// by file name) loses a node and waits for what the cluster does next.
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: true, RealNode: true, Install: localcluster.InstallHelm, FastNodeLoss: true,
		KeepDir: os.Getenv("TETHER_E2E_KEEP") == "1", Log: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, "install: starting the local cluster:", err)
		return 1
	}
	defer func() {
		stop := time.Now()
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "install: stopping the local cluster:", err)
		}
		logf("cluster stopped in %.1fs", time.Since(stop).Seconds())
	}()
	in := c.Installed
	logf("installed cluster up in %.1fs (dir %s); helm install %.1fs, to both replicas Ready and the webhooks served %.1fs",
		time.Since(start).Seconds(), c.Dir, in.HelmInstall.Seconds(), in.Ready.Seconds())
	cluster = c
	code := m.Run()
	logf("install total (setup and tests, before teardown): %.1fs", time.Since(start).Seconds())
	return code
}

func logf(format string, args ...any) {
	fmt.Printf("[install %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
