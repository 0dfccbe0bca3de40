package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// hostPodsNet is where the kwok pods' processes live on the cluster
// network. A kwok node runs no containers, so PodRunner runs a kwok pod's
// sidecar as a host process; with the network, in this namespace: joined
// to the bridge like a node (an address of the link, routes to each node's
// pod CIDR and the Service CIDR, nothing else), with its own kube-proxy routing Services, and
// a resolv.conf of the cluster DNS mounted over /etc/resolv.conf for each
// process (a mount namespace of its own). So a kwok pod's sidecar dials the
// URL the webhook injected, the Service's DNS name, and kube-proxy picks
// the replica from the Service's endpoints, as for a pod on a real node.
type hostPodsNet struct {
	holder *Process
	ip     net.IP
	// resolvConf is the file mounted over /etc/resolv.conf.
	resolvConf string
}

// hostPodsIndex places the namespace on the link after the nodes
// (nodeIP(hostPodsIndex)).
const hostPodsIndex = 19

// startHostPodsNet creates the kwok pods' namespace and its kube-proxy and
// waits until kube-proxy routes the `kubernetes` Service there. It runs
// after the nodes (CoreDNS answers by then).
func (c *Cluster) startHostPodsNet(ctx context.Context) error {
	nw := c.Network
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return err
	}
	hp := &hostPodsNet{ip: nw.nodeIP(hostPodsIndex), resolvConf: filepath.Join(c.Dir, "kwok-pods-resolv.conf")}
	if hp.holder, err = startProcessIn(c.logDir(), "netns-kwok-pods", sleep, []string{"infinity"}, nil, syscall.CLONE_NEWNET); err != nil {
		return err
	}
	c.onStop(func() error { return hp.holder.Stop(5 * time.Second) })
	nw.hostPods = hp
	ns := strconv.Itoa(hp.holder.PID())
	in := func(args ...string) []string { return append([]string{"nsenter", "-t", ns, "-n"}, args...) }
	steps := nw.plugSteps("kwok-pods", ns, hp.ip)
	for _, other := range nw.attached {
		steps = append(steps, in("ip", "route", "add", other.podCIDR.String(), "via", other.ip.String(), "dev", "eth0"))
	}
	// A local process's packet is routed before kube-proxy's DNAT (the
	// output hook) rewrites it: ClusterIPs need a route to start from.
	steps = append(steps, in("ip", "route", "add", nw.ServiceCIDR.String(), "dev", "eth0"))
	if err := run(steps...); err != nil {
		return err
	}
	// The search path of a pod in no namespace of its own: the injected
	// URL names <service>.<namespace>.svc.
	resolv := fmt.Sprintf("search svc.%[1]s %[1]s\nnameserver %[2]s\noptions ndots:5\n", ClusterDomain, nw.DNSServiceIP)
	if err := os.WriteFile(hp.resolvConf, []byte(resolv), 0o644); err != nil {
		return err
	}
	// kube-proxy, in nftables mode as on the nodes, as node 0's (a name
	// scopes node-local traffic policies only; one with no Node keeps
	// kube-proxy waiting 30 s for its addresses).
	path := filepath.Join(c.Dir, "kube-proxy-kwok-pods.yaml")
	if err := nw.writeKubeProxyConfig(path, NetworkNodeName(0), hp.ip); err != nil {
		return err
	}
	if _, err := c.start("kube-proxy-kwok-pods", "nsenter", []string{"-t", ns, "-n", c.bin("kube-proxy"), "--config=" + path, "--v=2"},
		"PATH="+c.Assets+":/usr/sbin:/usr/bin:/sbin:/bin"); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, "nsenter", "-t", ns, "-n", c.bin("nft"), "list", "table", "ip", "kube-proxy").CombinedOutput()
		if err == nil && strings.Contains(string(out), nw.KubernetesServiceIP.String()) && strings.Contains(string(out), nw.DNSServiceIP.String()) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy of the kwok pods' namespace: no rules for the kubernetes and kube-dns Services after 60s (%v): %s; see %s",
				err, strings.TrimSpace(string(out)), filepath.Join(c.logDir(), "kube-proxy-kwok-pods.log"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// command is bin with args as a process of the kwok pods' namespace: the
// namespace's network, and /etc/resolv.conf the cluster DNS's in a mount
// namespace of its own. Every step execs the next, so the process started
// is bin itself (its PID, its signals, its exit).
func (hp *hostPodsNet) command(bin string, args ...string) (string, []string) {
	return "nsenter", append([]string{"--net=/proc/" + strconv.Itoa(hp.holder.PID()) + "/ns/net", "--",
		"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, hp.resolvConf, bin}, args...)
}

// errNoHostPods: the cluster has no network, so its kwok pods' processes
// run in the host's.
var errNoHostPods = errors.New("the cluster has no network: kwok pods' processes run in the host's network namespace")

// HostPodsPID is the PID holding the kwok pods' network namespace, for a
// test's nsenter.
func (c *Cluster) HostPodsPID() (int, error) {
	hp := c.hostPods()
	if hp == nil {
		return 0, errNoHostPods
	}
	return hp.holder.PID(), nil
}

// hostPods is the kwok pods' namespace, or nil without the network.
func (c *Cluster) hostPods() *hostPodsNet {
	if c.Network == nil {
		return nil
	}
	return c.Network.hostPods
}
