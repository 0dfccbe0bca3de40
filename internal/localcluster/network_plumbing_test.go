package localcluster

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/internal/testenv"
)

// TestClusterNetworkPlumbing wires the cluster network's bridge, the host's
// veth and two node namespaces (held by plain processes, no kubelet) and
// checks what the nodes stand on: the host reaches a node, a node reaches
// the other, no namespace has a route to 192.0.2.1, and Stop leaves the
// host as it was. It runs in seconds; TestClusterNetwork proves the rest.
func TestClusterNetworkPlumbing(t *testing.T) {
	if os.Getenv("TETHER_E2E") != "1" {
		t.Skip("set TETHER_E2E=1 (make e2e) to create network namespaces and veth pairs")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the cluster network needs root")
	}
	c := &Cluster{Opts: Options{Log: t.Logf}}
	var err error
	if c.Dir, err = os.MkdirTemp("", "tether-plumbing-test-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(c.Dir) })
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	nftBin := filepath.Join(assets, "nft")
	before := hostNetworkState(t, nftBin)
	bin := filepath.Join(c.Dir, "bin")
	if err := goBuild(bin, "./internal/localcluster/netprobe"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	if err := c.startNetwork(); err != nil {
		t.Fatal(err)
	}
	sleep, _ := exec.LookPath("sleep")
	for i := range networkNodes {
		n := &RealNode{c: c, Name: NetworkNodeName(i), net: c.Network.nodeNet(i)}
		if n.init, err = startProcessIn(c.logDir(), n.Name, sleep, []string{"infinity"}, nil, syscall.CLONE_NEWNET); err != nil {
			t.Fatal(err)
		}
		c.onStop(func() error { return n.init.Stop(5 * time.Second) })
		c.Network.Nodes = append(c.Network.Nodes, n)
		if err := c.Network.attach(n); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("bridge, host veth and 2 node namespaces wired in %.2fs", time.Since(start).Seconds())
	a, b := c.Network.Nodes[0], c.Network.Nodes[1]
	srv := exec.Command("nsenter", "-t", strconv.Itoa(a.init.PID()), "-n", filepath.Join(bin, "netprobe"), "serve", "-listen", a.net.ip.String()+":8080")
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	url := "http://" + a.net.ip.String() + ":8080/"
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(b.init.PID()), "-n", filepath.Join(bin, "netprobe"), "check",
		"-get="+url, "-no-route=192.0.2.1").CombinedOutput()
	t.Logf("from %s: %s", b.Name, out)
	if err != nil {
		t.Errorf("node to node: %v", err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("host to node: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.HasPrefix(string(body), "netprobe") {
		t.Errorf("host to node: %q", body)
	}
	for _, n := range c.Network.Nodes {
		assertNoRoute(t, "node "+n.Name, n.init.PID())
	}
	_ = srv.Process.Kill()
	_ = srv.Wait()
	stopStart := time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %.2fs", time.Since(stopStart).Seconds())
	after := hostNetworkState(t, nftBin)
	for _, k := range sortedKeys(before, after) {
		if before[k] != after[k] {
			t.Errorf("host %s changed:\nbefore: %s\nafter:  %s", k, before[k], after[k])
		}
	}
}
