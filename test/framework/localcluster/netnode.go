package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/tether-dev/tether/internal/images"
	"github.com/tether-dev/tether/internal/version"
	"github.com/tether-dev/tether/test/framework/localcluster/nodespec"
)

// networkBinaries are what the network's nodes run besides the loopback
// node's, from hack/testbin.sh network.
var networkBinaries = []string{"kube-proxy", "coredns", "nft", "cni/bridge", "cni/host-local"}

// NetworkNodeName is the name of the network's node i.
func NetworkNodeName(i int) string { return "tether-net-" + strconv.Itoa(i) }

// startNetNodes starts the network's real nodes (each in network, PID and
// mount namespaces of its own, with kube-proxy beside the kubelet), waits
// until they are Ready, then runs CoreDNS.
func (c *Cluster) startNetNodes(ctx context.Context) error {
	if c.Network == nil {
		return fmt.Errorf("internal: startNetNodes before startNetwork")
	}
	var missing []string
	for _, b := range append(append([]string{}, nodeBinaries...), networkBinaries...) {
		if _, err := os.Stat(c.bin(b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the cluster network needs %s in %s: run `hack/testbin.sh network` (kube-proxy, CoreDNS, Debian's nft, and the real node's pieces)",
			strings.Join(missing, ", "), c.Assets)
	}
	imgs, err := nodeImages()
	if err != nil {
		return err
	}
	extra, err := c.networkImages()
	if err != nil {
		return err
	}
	imgs = append(imgs, extra...)
	installed, tags, err := c.installImages()
	if err != nil {
		return err
	}
	imgs = append(imgs, installed...)
	if err := c.buildNodeInit(); err != nil {
		return err
	}
	id := filepath.Base(c.Dir)
	for i := range networkNodes {
		nn := c.Network.nodeNet(i)
		n := &RealNode{c: c, Name: NetworkNodeName(i), Images: imgs, Tags: tags, net: nn,
			KubeletAddr: net.JoinHostPort(nn.ip.String(), "10250")}
		n.Dir = filepath.Join(c.Dir, n.Name)
		n.CgroupRoot = "/tether-" + id + "-" + n.Name
		c.Network.Nodes = append(c.Network.Nodes, n)
		if err := n.start(); err != nil {
			return err
		}
	}
	for _, n := range c.Network.Nodes {
		if err := n.waitReady(ctx); err != nil {
			return err
		}
	}
	return c.startCoreDNS(ctx)
}

// networkImages builds the images of images.NetworkSpecs into <Dir>/images:
// CoreDNS from the binary hack/testbin.sh built, netprobe from this module.
func (c *Cluster) networkImages() ([]images.Written, error) {
	if err := goBuild(filepath.Join(c.Dir, "bin"), "./test/framework/localcluster/netprobe"); err != nil {
		return nil, err
	}
	meta := images.Meta{Version: version.Version, Revision: strings.Repeat("0", 40), Created: time.Unix(0, 0)}
	var out []images.Written
	for _, s := range images.NetworkSpecs(version.Registry) {
		w, err := c.prebuiltImage(s, meta)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// prebuiltImage writes s's image at meta's version into <Dir>/images, for
// this machine's platform, from hack/testbin.sh's binary s.Binary, or else
// from <Dir>/bin/<entrypoint's name>, built there before.
func (c *Cluster) prebuiltImage(s images.Spec, meta images.Meta) (images.Written, error) {
	bin := filepath.Join(c.Dir, "bin", filepath.Base(s.Entrypoint))
	if s.Binary != "" {
		bin = resolvedDir(c.bin(s.Binary))
	}
	img, err := images.Image(s, meta, v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, bin)
	if err != nil {
		return images.Written{}, fmt.Errorf("image %s: %w", s.Title(), err)
	}
	w, err := images.Write(filepath.Join(c.Dir, "images"), s, s.Ref(meta), img, meta.Created)
	if err != nil {
		return images.Written{}, fmt.Errorf("image %s: %w", s.Title(), err)
	}
	return w, nil
}

// kubeProxyStep is kube-proxy in the node's namespaces, in nftables mode
// (Debian's nft first on PATH): its rules live in the node's network
// namespace only. It masquerades nothing but a pod reaching itself through
// a Service (no clusterCIDR: no off-cluster masquerade), opens no node
// ports beyond the node link, and leaves the conntrack sysctls as they are.
func (nn *netNode) kubeProxyStep(n *RealNode, env []string) (nodespec.Step, error) {
	path := filepath.Join(n.Dir, "kube-proxy.yaml")
	if err := nn.network.writeKubeProxyConfig(path, n.Name, nn.ip); err != nil {
		return nodespec.Step{}, err
	}
	return nodespec.Step{Name: "kube-proxy", Path: n.c.bin("kube-proxy"), Env: env, Log: n.logFile("kube-proxy"),
		Args: []string{"--config=" + path, "--v=2"}}, nil
}

// PodCIDR is the node's pod CIDR (its pods' addresses).
func (n *RealNode) PodCIDR() *net.IPNet { return n.net.podCIDR }

// IP is the node's address on the cluster network.
func (n *RealNode) IP() net.IP { return n.net.ip }

// writeKubeProxyConfig writes the KubeProxyConfiguration of a kube-proxy
// bound to ip on the link, as node hostname (kubeProxyStep's terms).
func (nw *ClusterNetwork) writeKubeProxyConfig(path, hostname string, ip net.IP) error {
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]q
hostnameOverride: %[2]q
bindAddress: %[3]s
mode: nftables
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses:
- %[4]s
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, nw.c.Kubeconfig, hostname, ip, nw.link)
	return os.WriteFile(path, []byte(config), 0o600)
}
