package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// podBlackholeTable is the nftables table of BlackholePod in a pod's
// network namespace.
const podBlackholeTable = "tether_pod_blackhole"

// BlackholePod starts (on) or ends a black hole inside the network
// namespace of one pod on the real node: the pod's TCP packets to port and
// from port, as the pod addresses them (a Service's port: kube-proxy's DNAT
// happens after, in the node's namespace), are dropped both ways, open
// connections and new. The pod sees a network that never delivers (a
// partition, not a refusal); the peer sees silence. It is the installed
// control plane's counterpart of BlackholeBinding, whose replicas are pods
// here, for one job's session rather than every sidecar's. containerID is
// any running container of the pod (its processes give the namespace). The
// table lives in the pod's namespace only (it goes with the pod); off
// deletes it.
func (n *RealNode) BlackholePod(containerID string, port int32, on bool) error {
	pids, err := n.ContainerPIDs(containerID)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("container %s has no processes", containerID)
	}
	in := []string{"nsenter", "-t", strconv.Itoa(pids[0]), "-n", n.c.bin("nft")}
	if !on {
		if err := run(append(in, "delete", "table", "inet", podBlackholeTable)); err != nil {
			return fmt.Errorf("node %s, container %s: %w", n.Name, containerID, err)
		}
		return nil
	}
	rules := fmt.Sprintf(`table inet %[1]s {
  chain output {
    type filter hook output priority -10; policy accept;
    tcp dport %[2]d drop
  }
  chain input {
    type filter hook input priority -10; policy accept;
    tcp sport %[2]d drop
  }
}
`, podBlackholeTable, port)
	file := filepath.Join(n.Dir, "pod-blackhole-"+strconv.Itoa(pids[0])+".nft")
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		return err
	}
	if err := run(append(in, "-f", file)); err != nil {
		return fmt.Errorf("node %s, container %s: %w", n.Name, containerID, err)
	}
	return nil
}
