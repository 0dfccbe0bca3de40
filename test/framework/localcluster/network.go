package localcluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NetworkRange is the range the cluster networks take their addresses
// from: 198.18.0.0/15, reserved for network tests. Every
// address exists only on interfaces the harness creates, and it is the
// only range pods and nodes route.
var NetworkRange = mustCIDR("198.18.0.0/15")

// NetworkNodeLabelValue is RealNodeLabel's value (and its NoSchedule
// taint's) on the cluster network's nodes: only pods that tolerate it land
// there, never a pod meant for the kwok nodes.
const NetworkNodeLabelValue = "network"

// ClusterDomain is the kubelets' clusterDomain and CoreDNS's zone.
const ClusterDomain = "cluster.local"

// networkNodes is how many real nodes the network has.
const networkNodes = 2

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

// ClusterNetwork joins the host and the real nodes of the cluster network:
// a Linux bridge inside a network namespace of its own (held by a process
// of the harness, so the kernel frees it if the harness dies), one veth from
// the host to it and one from each node's namespace to it. The host gets
// one address (HostIP) and routes into the nodes' pod CIDRs only;
// no namespace has a default route, and the host's forwarding and sysctls
// are untouched (forwarding happens inside the nodes' namespaces).
type ClusterNetwork struct {
	c *Cluster
	// netBlock is the network's share of NetworkRange: its addresses.
	netBlock
	// HostLink is the host's end of its veth (tth-<6 hex>).
	HostLink string
	// Nodes are the network's real nodes, in address order.
	Nodes  []*RealNode
	bridge *Process
	// hostRoutes are the routes added on the host ("<cidr> via <ip>").
	hostRoutes []string
	// attached are the nodes wired so far.
	attached []*netNode
	// hostPods is the kwok pods' namespace (nethostpods.go), once started.
	hostPods *hostPodsNet
	// faultsMu guards blackholed, which says the binding's black hole is
	// on (a node started again while it is gets it too).
	faultsMu   sync.Mutex
	blackholed bool
}

// netNode is one real node's place on the network.
type netNode struct {
	network *ClusterNetwork
	ip      net.IP
	podCIDR *net.IPNet
}

// startNetwork creates the bridge's namespace, the bridge and the host's
// veth with HostIP; it runs before kube-apiserver, which listens
// there.
func (c *Cluster) startNetwork() error {
	if os.Geteuid() != 0 {
		return errors.New("the cluster network needs root (network namespaces, veth pairs)")
	}
	for _, tool := range []string{"ip", "nsenter", "sysctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the cluster network needs %s (iproute2, util-linux, procps) on PATH: %w", tool, err)
		}
	}
	// Each network takes a block of its own, so several clusters run
	// side by side (CI runs test/install beside the e2e suite).
	block, err := claimNetBlock()
	if err != nil {
		return err
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return err
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	nw := &ClusterNetwork{c: c, HostLink: "tth-" + hex.EncodeToString(suffix), netBlock: block}
	// The holder dies with the harness (Pdeathsig), and with it the bridge
	// and every veth end in its namespace: the host's end goes too.
	if nw.bridge, err = startProcessIn(c.logDir(), "netns-bridge", sleep, []string{"infinity"}, nil, syscall.CLONE_NEWNET); err != nil {
		block.release()
		return err
	}
	c.Network = nw // Stop removes it, last
	br := strconv.Itoa(nw.bridge.PID())
	ones, _ := nw.link.Mask.Size()
	steps := [][]string{
		{"ip", "link", "add", nw.HostLink, "type", "veth", "peer", "name", "host", "netns", br},
		{"ip", "addr", "add", nw.HostIP.String() + "/" + strconv.Itoa(ones), "dev", nw.HostLink},
		{"ip", "link", "set", nw.HostLink, "up"},
		{"nsenter", "-t", br, "-n", "ip", "link", "add", "br0", "type", "bridge"},
		{"nsenter", "-t", br, "-n", "ip", "link", "set", "host", "master", "br0", "up"},
		{"nsenter", "-t", br, "-n", "ip", "link", "set", "br0", "up"},
	}
	return run(steps...)
}

// nodeNet reserves node i's address and pod CIDR.
func (nw *ClusterNetwork) nodeNet(i int) *netNode {
	return &netNode{network: nw, ip: nw.nodeIP(i), podCIDR: nw.podCIDR(i)}
}

// attach wires a node whose node-init has just started in a new network
// namespace: a veth from the bridge into it (eth0, the node's address),
// routes to the other nodes' pod CIDRs (each node routes its own through
// the CNI bridge), forwarding on inside the node, and a host route to its
// pod CIDR so the apiserver's replies reach pods.
func (nw *ClusterNetwork) attach(n *RealNode) error { return nw.wire(n, true) }

// reattach wires a node started again after Kill (RealNode.Restart) into
// a new network namespace: its veth, address and routes out. What lives
// outside the node's namespace stays from attach: the other nodes' routes
// to its pod CIDR and the host's, through its unchanged address.
func (nw *ClusterNetwork) reattach(n *RealNode) error { return nw.wire(n, false) }

func (nw *ClusterNetwork) wire(n *RealNode, first bool) error {
	nn := n.net
	node := strconv.Itoa(n.init.PID())
	port := "n-" + n.Name[len(n.Name)-1:]
	in := func(args ...string) []string { return append([]string{"nsenter", "-t", node, "-n"}, args...) }
	steps := append(nw.plugSteps(port, node, nn.ip),
		// The node routes between its pods and eth0; the host does not.
		in("sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
	// Bridged pod-to-pod replies after a Service's DNAT must pass the
	// node's own netfilter (per-namespace since Linux 5.3).
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err == nil {
		steps = append(steps, in("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"))
	}
	for _, other := range nw.attached {
		if other == nn {
			continue
		}
		steps = append(steps, in("ip", "route", "add", other.podCIDR.String(), "via", other.ip.String(), "dev", "eth0"))
		if first {
			steps = append(steps, []string{"nsenter", "-t", strconv.Itoa(nw.nodeInitPID(other)), "-n", "ip", "route", "add", nn.podCIDR.String(), "via", nn.ip.String(), "dev", "eth0"})
		}
	}
	if !first {
		return run(steps...)
	}
	route := nn.podCIDR.String() + " via " + nn.ip.String()
	steps = append(steps, []string{"ip", "route", "add", nn.podCIDR.String(), "via", nn.ip.String(), "dev", nw.HostLink})
	if err := run(steps...); err != nil {
		return err
	}
	nw.hostRoutes = append(nw.hostRoutes, route)
	nw.attached = append(nw.attached, nn)
	return nil
}

// plugSteps wire the network namespace of pid (a node's, or the kwok
// pods') to the bridge: a veth named port on the bridge's side, eth0 with
// ip on the link inside, both up, and its loopback.
func (nw *ClusterNetwork) plugSteps(port, pid string, ip net.IP) [][]string {
	br := strconv.Itoa(nw.bridge.PID())
	ones, _ := nw.link.Mask.Size()
	in := func(args ...string) []string { return append([]string{"nsenter", "-t", pid, "-n"}, args...) }
	return [][]string{
		{"nsenter", "-t", br, "-n", "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{"nsenter", "-t", br, "-n", "ip", "link", "set", port, "master", "br0", "up"},
		in("ip", "link", "set", "lo", "up"),
		in("ip", "addr", "add", ip.String()+"/"+strconv.Itoa(ones), "dev", "eth0"),
		in("ip", "link", "set", "eth0", "up"),
	}
}

func (nw *ClusterNetwork) nodeInitPID(nn *netNode) int {
	for _, n := range nw.Nodes {
		if n.net == nn {
			return n.init.PID()
		}
	}
	return 0
}

// stop removes the host's routes and veth (its peer in the bridge's
// namespace goes with it) and ends the bridge's namespace. Cluster.Stop
// calls it last: the nodes' namespaces ended with their node-init, and
// kube-apiserver no longer listens on the veth.
func (nw *ClusterNetwork) stop() error {
	var errs []error
	for _, r := range nw.hostRoutes {
		args := append([]string{"ip", "route", "del"}, strings.Fields(r)...)
		if err := run(append(args, "dev", nw.HostLink)); err != nil && linkExists(nw.HostLink) {
			errs = append(errs, err)
		}
	}
	nw.hostRoutes = nil
	if linkExists(nw.HostLink) {
		if err := run([]string{"ip", "link", "del", nw.HostLink}); err != nil {
			errs = append(errs, err)
		}
	}
	if nw.bridge != nil {
		errs = append(errs, nw.bridge.Stop(5*time.Second))
	}
	// Free the block last: a network claiming it next finds nothing of
	// this one's on the host.
	nw.release()
	return errors.Join(errs...)
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// run runs each command in turn, stopping at the first that fails.
func run(cmds ...[]string) error {
	for _, args := range cmds {
		cmd := exec.Command(args[0], args[1:]...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
		}
	}
	return nil
}

// cniConfig is the node's CNI network: the bridge plugin on cni0 with the
// node's pod CIDR from host-local, the bridge as the pods' gateway for
// NetworkRange only (no default route), no masquerade, hairpin on so a pod
// reaches itself through a Service.
func (nn *netNode) cniConfig() string {
	gw := make(net.IP, 4)
	copy(gw, nn.podCIDR.IP.To4())
	gw[3] = 1
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "tether",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "isDefaultGateway": false,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q, "gateway": %q}]],
      "routes": [{"dst": %q}]
    }
  }]
}
`, nn.podCIDR.String(), gw.String(), NetworkRange.String())
}

// resolvConf is the kubelets' resolvConf, a file of the harness's own: the
// cluster DNS only, so a pod with dnsPolicy Default asks CoreDNS too and
// nothing ever reaches the host's resolvers.
func (nn *netNode) resolvConf() string {
	return "nameserver " + nn.network.DNSServiceIP.String() + "\n"
}

// kubeletConfig is appended to the node's KubeletConfiguration.
func (nn *netNode) kubeletConfig() string {
	return fmt.Sprintf("clusterDNS:\n- %s\nclusterDomain: %s\n", nn.network.DNSServiceIP, ClusterDomain)
}
