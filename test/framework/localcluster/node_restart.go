package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Restart powers a node killed by Kill on again, as a machine that lost
// power comes back: what a disk keeps stays (containerd's images and
// snapshots, the kubelet's root with its pods' volumes, the certificates),
// what a reboot clears goes (the directory bound over /run, containerd's
// and runc's state, the node's cgroups), and node-init starts in new PID,
// mount and network namespaces, wired to the bridge again at the node's
// address. The kubelet registers under the same name; it returns when the
// node is Ready again. The pods the node ran are the kubelet's to settle
// (their containers are gone), as after a real reboot.
func (n *RealNode) Restart(ctx context.Context) error {
	if n.init == nil {
		return fmt.Errorf("node %s was never started", n.Name)
	}
	if n.Running() {
		return fmt.Errorf("node %s is running: Kill it first", n.Name)
	}
	if err := n.clearCgroups(20 * time.Second); err != nil {
		return fmt.Errorf("after the kill: %w", err)
	}
	var errs []error
	for _, d := range []string{"run", "containerd/state", "runc"} {
		errs = append(errs, os.RemoveAll(filepath.Join(n.Dir, d)))
	}
	if err := os.Remove(filepath.Join(n.Dir, "network-ready")); !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err) // node-init must wait for the new wiring
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node %s: clearing what a reboot clears: %w", n.Name, err)
	}
	n.restarts++
	start := time.Now()
	if err := n.start(); err != nil {
		return fmt.Errorf("node %s: starting again: %w", n.Name, err)
	}
	if err := n.net.network.reapplyFaults(n); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	n.c.logf("node %s restarted and Ready in %.1fs (node-init pid %d)", n.Name, time.Since(start).Seconds(), n.init.PID())
	return nil
}

// Running says whether the node's node-init runs (false after Kill, until
// Restart).
func (n *RealNode) Running() bool {
	if n.init == nil {
		return false
	}
	exited, _ := n.init.Exited()
	return !exited
}
