package localcluster

import (
	"net"
	"testing"
)

// TestNetBlocksApart: every block's addresses are inside NetworkRange and
// its own /20, no two blocks overlap, and none touches the kwok nodes'
// fake pod range.
func TestNetBlocksApart(t *testing.T) {
	kwokPods := mustCIDR("198.19.0.0/16")
	seen := map[string]int{}
	for k := range netBlocks {
		b := newNetBlock(k)
		addrs := []net.IP{b.link.IP, b.HostIP, b.ServiceCIDR.IP, b.KubernetesServiceIP, b.DNSServiceIP}
		for i := range networkNodes {
			addrs = append(addrs, b.nodeIP(i), b.podCIDR(i).IP)
		}
		for _, ip := range addrs {
			if !NetworkRange.Contains(ip) || !b.Block().Contains(ip) || kwokPods.Contains(ip) {
				t.Errorf("block %d (%s): %s outside it, outside %s, or in the kwok range", k, b.Block(), ip, NetworkRange)
			}
		}
		for _, n := range []*net.IPNet{b.link, b.ServiceCIDR, b.podCIDR(0), b.podCIDR(1)} {
			if j, dup := seen[n.String()]; dup {
				t.Errorf("%s is in block %d and block %d", n, j, k)
			}
			seen[n.String()] = k
		}
		if !b.ServiceCIDR.Contains(b.DNSServiceIP) || !b.ServiceCIDR.Contains(b.KubernetesServiceIP) || !b.link.Contains(b.nodeIP(1)) {
			t.Errorf("block %d: a Service IP outside %s or a node outside %s", k, b.ServiceCIDR, b.link)
		}
	}
	if b := newNetBlock(0); b.HostIP.String() != "198.18.0.1" || b.podCIDR(1).String() != "198.18.2.0/24" || b.DNSServiceIP.String() != "198.18.15.10" {
		t.Errorf("block 0: host %s, node 1's pods %s, DNS %s", b.HostIP, b.podCIDR(1), b.DNSServiceIP)
	}
}
