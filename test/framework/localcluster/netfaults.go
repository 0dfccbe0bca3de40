package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// blackholeTable is the nftables table of BlackholeBinding in each node's
// network namespace.
const blackholeTable = "tether_blackhole"

// blackhole drops, in every node's network namespace and the kwok pods',
// the packets to and from the given ports of HostIP (the replicas' binding
// servers after kube-proxy's DNAT): forwarded ones (the nodes' pods) and
// the namespace's own (the kwok pods' processes), both directions, open
// connections and new: the pods see a network that never delivers (a
// partition, not a refusal). Off deletes the table. The host's rules are
// untouched: the table lives in the harness's namespaces only.
func (nw *ClusterNetwork) blackhole(ports []int32, on bool) error {
	var set []string
	for _, p := range ports {
		set = append(set, strconv.Itoa(int(p)))
	}
	rules := fmt.Sprintf(`table inet %[1]s {
  chain forward {
    type filter hook forward priority -10; policy accept;
    ip daddr %[2]s tcp dport { %[3]s } drop
    ip saddr %[2]s tcp sport { %[3]s } drop
  }
  chain output {
    type filter hook output priority -10; policy accept;
    ip daddr %[2]s tcp dport { %[3]s } drop
  }
  chain input {
    type filter hook input priority -10; policy accept;
    ip saddr %[2]s tcp sport { %[3]s } drop
  }
}
`, blackholeTable, nw.HostIP, strings.Join(set, ", "))
	if err := os.WriteFile(nw.blackholeRules(), []byte(rules), 0o600); err != nil {
		return err
	}
	nw.faultsMu.Lock()
	defer nw.faultsMu.Unlock()
	nw.blackholed = on
	for _, n := range nw.Nodes {
		if !n.Running() {
			continue // killed: its namespace is gone; Restart applies what holds then
		}
		if err := n.applyBlackhole(on); err != nil {
			return err
		}
	}
	if nw.hostPods != nil {
		if err := nw.applyBlackholeIn(nw.hostPods.holder.PID(), on); err != nil {
			return fmt.Errorf("the kwok pods' namespace: %w", err)
		}
	}
	return nil
}

// blackholeRules is the file of the black hole's nftables rules, written
// by blackhole and loaded into each running node's namespace.
func (nw *ClusterNetwork) blackholeRules() string { return filepath.Join(nw.c.Dir, "blackhole.nft") }

// applyBlackhole loads (on) or deletes the black hole's table in the node's
// network namespace.
func (n *RealNode) applyBlackhole(on bool) error {
	if err := n.net.network.applyBlackholeIn(n.init.PID(), on); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	return nil
}

// applyBlackholeIn loads (on) or deletes the black hole's table in the
// network namespace of pid.
func (nw *ClusterNetwork) applyBlackholeIn(pid int, on bool) error {
	in := []string{"nsenter", "-t", strconv.Itoa(pid), "-n", nw.c.bin("nft")}
	if on {
		return run(append(in, "-f", nw.blackholeRules()))
	}
	err := run(append(in, "delete", "table", "inet", blackholeTable))
	if err != nil && strings.Contains(err.Error(), "No such file or directory") {
		// Not there: the node was killed and started again while the hole
		// was on, and its new namespace never got the table (Restart
		// re-applies faults only once it is wired). Off is off.
		err = nil
	}
	return err
}

// reapplyFaults gives a node started again (Restart) the network faults on
// now: its new namespace has none of the tables of the old.
func (nw *ClusterNetwork) reapplyFaults(n *RealNode) error {
	nw.faultsMu.Lock()
	defer nw.faultsMu.Unlock()
	if !nw.blackholed {
		return nil
	}
	return n.applyBlackhole(true)
}
