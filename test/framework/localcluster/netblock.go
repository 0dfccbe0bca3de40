package localcluster

import (
	"errors"
	"fmt"
	"net"
)

// netBlocks is how many cluster networks can run on one host at once: each
// takes a /20 of 198.18.0.0/16 (the kwok nodes' fake pod range is
// 198.19.0.0/16, routed nowhere).
const netBlocks = 16

// netBlock is one cluster network's share of NetworkRange. Block k is
// 198.18.16k.0/20:
//
//	198.18.16k.0/24       the link joining the host and the nodes: the
//	                      host's veth .1, node i .11+i
//	198.18.16k+1+i.0/24   node i's pod CIDR
//	198.18.16k+15.0/24    Service ClusterIPs: kubernetes .1, kube-dns .10
//
// A network holds its block by an abstract Unix socket named after it: the
// kernel frees the name when the socket closes or the holder dies, and
// leaves no file behind.
type netBlock struct {
	// index is k.
	index int
	// link is the subnet of the bridge joining the host and the nodes.
	link *net.IPNet
	// HostIP is the host's end of its veth: the apiserver listens there
	// (and on nothing else), the nodes reach it there, and so do the
	// Services of what the harness runs as host processes.
	HostIP net.IP
	// ServiceCIDR is the apiserver's --service-cluster-ip-range;
	// KubernetesServiceIP the `kubernetes` Service's ClusterIP (its first),
	// DNSServiceIP kube-dns's.
	ServiceCIDR         *net.IPNet
	KubernetesServiceIP net.IP
	DNSServiceIP        net.IP
	hold                net.Listener
}

// newNetBlock is block k's layout, unclaimed.
func newNetBlock(k int) netBlock {
	third := byte(16 * k)
	ip := func(third, fourth byte) net.IP { return net.IPv4(198, 18, third, fourth).To4() }
	return netBlock{
		index:               k,
		link:                &net.IPNet{IP: ip(third, 0), Mask: net.CIDRMask(24, 32)},
		HostIP:              ip(third, 1),
		ServiceCIDR:         &net.IPNet{IP: ip(third+15, 0), Mask: net.CIDRMask(24, 32)},
		KubernetesServiceIP: ip(third+15, 1),
		DNSServiceIP:        ip(third+15, 10),
	}
}

// Block is the block's own range, 198.18.16k.0/20.
func (b netBlock) Block() *net.IPNet {
	return &net.IPNet{IP: b.link.IP, Mask: net.CIDRMask(20, 32)}
}

// nodeIP is node i's address on the link.
func (b netBlock) nodeIP(i int) net.IP {
	ip := append(net.IP{}, b.link.IP.To4()...)
	ip[3] = byte(11 + i)
	return ip
}

// podCIDR is node i's pod CIDR.
func (b netBlock) podCIDR(i int) *net.IPNet {
	ip := append(net.IP{}, b.link.IP.To4()...)
	ip[2] += byte(1 + i)
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(24, 32)}
}

// claimNetBlock claims the first block no other network holds and of which
// the host has no address (one left behind by a harness that could not
// clean up is skipped, and named if no block is left).
func claimNetBlock() (netBlock, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netBlock{}, err
	}
	var leftovers []string
	for k := range netBlocks {
		b := newNetBlock(k)
		hold, err := net.Listen("unix", fmt.Sprintf("@tether-localcluster-network-%d", k))
		if err != nil {
			continue // another network holds it
		}
		inUse := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && b.Block().Contains(ipn.IP) {
				inUse = true
				leftovers = append(leftovers, ipn.String())
			}
		}
		if inUse {
			_ = hold.Close()
			continue
		}
		b.hold = hold
		return b, nil
	}
	msg := fmt.Sprintf("all %d cluster network blocks of %s are in use by other local clusters", netBlocks, NetworkRange)
	if len(leftovers) > 0 {
		msg += fmt.Sprintf(", or hold addresses no running cluster claims (%v: a network left behind; delete its tth- link)", leftovers)
	}
	return netBlock{}, errors.New(msg)
}

// release frees the block for the next network.
func (b *netBlock) release() {
	if b.hold != nil {
		_ = b.hold.Close()
		b.hold = nil
	}
}
