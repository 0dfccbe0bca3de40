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

	"github.com/tether-dev/tether/test/framework/testenv"
)

// TestClusterNetworkPlumbing wires two cluster networks side by side, each
// its bridge, the host's veth and two node namespaces (held by plain
// processes, no kubelet), and checks what the nodes stand on: each network
// has a block of its own; the host reaches a node, a node reaches the
// other of its network and has no route to the other network or to
// 192.0.2.1; and Stop leaves the host as it was. It runs in seconds;
// TestClusterNetwork proves the rest.
func TestClusterNetworkPlumbing(t *testing.T) {
	if os.Getenv("TETHER_E2E") != "1" {
		t.Skip("set TETHER_E2E=1 (make e2e) to create network namespaces and veth pairs")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the cluster network needs root")
	}
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	nftBin := filepath.Join(assets, "nft")
	before := hostNetworkState(t, nftBin)
	bin := t.TempDir()
	if err := goBuild(bin, "./test/framework/localcluster/netprobe"); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(bin, "netprobe")
	start := time.Now()
	a, b := plumbedNetwork(t), plumbedNetwork(t)
	t.Logf("two networks (bridge, host veth and 2 node namespaces each) wired in %.2fs: %s and %s",
		time.Since(start).Seconds(), a.Network.Block(), b.Network.Block())
	if a.Network.Block().Contains(b.Network.HostIP) || b.Network.Block().Contains(a.Network.HostIP) {
		t.Fatalf("two networks share a block: %s and %s", a.Network.Block(), b.Network.Block())
	}
	for _, c := range []*Cluster{a, b} {
		other := a
		if c == a {
			other = b
		}
		n0, n1 := c.Network.Nodes[0], c.Network.Nodes[1]
		srv := exec.Command("nsenter", "-t", strconv.Itoa(n0.init.PID()), "-n", probe, "serve", "-listen", n0.net.ip.String()+":8080")
		srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		url := "http://" + n0.net.ip.String() + ":8080/"
		for _, noRoute := range []string{"192.0.2.1", other.Network.HostIP.String(), other.Network.Nodes[0].net.ip.String()} {
			out, err := exec.Command("nsenter", "-t", strconv.Itoa(n1.init.PID()), "-n", probe, "check",
				"-get="+url, "-no-route="+noRoute).CombinedOutput()
			t.Logf("from %s: %s", n1.Name, out)
			if err != nil {
				t.Errorf("%s: node to node, or a route to %s: %v", n1.Name, noRoute, err)
			}
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
	}
	stopStart := time.Now()
	for _, c := range []*Cluster{a, b} {
		if err := c.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	t.Logf("stopped in %.2fs", time.Since(stopStart).Seconds())
	after := hostNetworkState(t, nftBin)
	for _, k := range sortedKeys(before, after) {
		if before[k] != after[k] {
			t.Errorf("host %s changed:\nbefore: %s\nafter:  %s", k, before[k], after[k])
		}
	}
	// The blocks are free again: a third network takes the first.
	c := plumbedNetwork(t)
	if c.Network.index != a.Network.index {
		t.Errorf("after both stopped, a new network took block %d, want %d (freed)", c.Network.index, a.Network.index)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
}

// plumbedNetwork starts a cluster network's bridge and host veth, and two
// node namespaces wired to it; the test's cleanup stops what is left.
func plumbedNetwork(t *testing.T) *Cluster {
	t.Helper()
	c := &Cluster{Opts: Options{Log: t.Logf}, Dir: t.TempDir()}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	c.onStop(func() error { stopped = true; return nil })
	if err := c.startNetwork(); err != nil {
		t.Fatal(err)
	}
	sleep, _ := exec.LookPath("sleep")
	for i := range networkNodes {
		n := &RealNode{c: c, Name: NetworkNodeName(i), net: c.Network.nodeNet(i)}
		var err error
		if n.init, err = startProcessIn(c.logDir(), n.Name, sleep, []string{"infinity"}, nil, syscall.CLONE_NEWNET); err != nil {
			t.Fatal(err)
		}
		c.onStop(func() error { return n.init.Stop(5 * time.Second) })
		c.Network.Nodes = append(c.Network.Nodes, n)
		if err := c.Network.attach(n); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
