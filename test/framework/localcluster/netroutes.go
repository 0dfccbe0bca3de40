package localcluster

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The EndpointSlices the harness writes for the control plane reach the
// pods only once each namespace's kube-proxy has synced them (about a
// second): a test that prefers a replica and then starts a job waits for
// the routes, not the slices.

// serviceEndpoint matches an endpoint in a service chain of kube-proxy's
// nftables table: "dnat to <ip>:<port>" for one endpoint, "<i> : <ip> .
// <port>" in the numgen map of several.
var serviceEndpoint = regexp.MustCompile(`([0-9]+\.[0-9]+\.[0-9]+\.[0-9]+)(?::| \. )([0-9]+)`)

// bindingRoutes is the set of binding ports kube-proxy in the network
// namespace of pid sends the control plane's binding Service to (sorted;
// empty when it has no endpoint).
func (nw *ClusterNetwork) bindingRoutes(ctx context.Context, pid int) ([]int32, error) {
	out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(pid), "-n", nw.c.bin("nft"), "list", "table", "ip", "kube-proxy").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nft list table ip kube-proxy: %w: %s", err, strings.TrimSpace(string(out)))
	}
	var ports []int32
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "chain service-") && strings.Contains(line, "/"+ControlPlaneService+"/tcp/binding "):
			in = true
		case in && line == "}":
			in = false
		case in:
			for _, m := range serviceEndpoint.FindAllStringSubmatch(line, -1) {
				if m[1] == nw.HostIP.String() {
					p, _ := strconv.Atoi(m[2])
					ports = append(ports, int32(p))
				}
			}
		}
	}
	slices.Sort(ports)
	return slices.Compact(ports), nil
}

// waitBindingRoutes waits until kube-proxy in every running node's
// namespace and the kwok pods' sends the binding Service to exactly the
// endpoints the harness wrote as ready (the preferred replica's alone while
// one is preferred), writing the slices again while it waits (a write can
// lose a race with the readiness poll's).
func (t *Tether) waitBindingRoutes(ctx context.Context, timeout time.Duration) error {
	nw := t.c.Network
	deadline := time.Now().Add(timeout)
	for {
		t.syncEndpoints()
		want := t.endpoints.bindingPorts()
		var pids []int
		for _, n := range nw.Nodes {
			if n.Running() {
				pids = append(pids, n.init.PID())
			}
		}
		if nw.hostPods != nil {
			pids = append(pids, nw.hostPods.holder.PID())
		}
		var behind []string
		for _, pid := range pids {
			got, err := nw.bindingRoutes(ctx, pid)
			if err != nil {
				behind = append(behind, fmt.Sprintf("pid %d: %v", pid, err))
			} else if !slices.Equal(got, want) {
				behind = append(behind, fmt.Sprintf("pid %d's namespace routes to %v", pid, got))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the binding Service's routes are not the endpoints written (%v) after %s: %s", want, timeout, strings.Join(behind, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
