package localcluster

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// TestClusterNetwork brings up the cluster network alone (etcd,
// kube-apiserver on the host's veth address, kube-controller-manager,
// kube-scheduler, two real nodes with kube-proxy, CoreDNS) and proves from
// inside pods: pod to pod across the nodes, ClusterIP Services from both
// nodes (to a backend on the same node and on the other), DNS of Service
// names (and nothing outside the cluster zone), in-cluster config through
// the `kubernetes` Service; that neither a node's namespace nor a pod has a
// route to 192.0.2.1 (the host's own gateway) or a default route; and that
// the host's interfaces, addresses, routes, rules, nftables ruleset,
// network namespaces and network sysctls are the same after Stop as before.
func TestClusterNetwork(t *testing.T) {
	if os.Getenv("TETHER_E2E") != "1" {
		t.Skip("set TETHER_E2E=1 (make e2e) to run real kubelets, containerd and kube-proxy")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the cluster network needs root (namespaces, veth pairs, cgroups, mounts)")
	}
	ctx := context.Background()
	// KeepDir: Stop leaves the directory to the cleanups (logTails first).
	c := &Cluster{Opts: Options{Log: t.Logf, KeepDir: true}}
	var err error
	if c.Dir, err = os.MkdirTemp("", "tether-network-test-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(c.Dir) })
	t.Cleanup(func() { logTails(t, c.logDir()) })
	if c.Assets, err = testenv.Assets(); err != nil {
		t.Fatal(err)
	}
	if c.CA, err = newCA(); err != nil {
		t.Fatal(err)
	}
	before := hostNetworkState(t, c.bin("nft"))

	start := time.Now()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	if err := c.startNetwork(); err != nil {
		t.Fatal(err)
	}
	c.CertDir = filepath.Join(c.Dir, "certs")
	if err := c.writeServingCert(c.CertDir); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func(context.Context) error{c.startAPIServer, c.startControllerManager, c.startScheduler, c.startNetNodes} {
		if err := step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("network up (2 nodes Ready, CoreDNS ready) %.1fs after start", time.Since(start).Seconds())
	if host := c.Config.Host; !strings.Contains(host, c.Network.HostIP.String()) {
		t.Errorf("the harness reaches the apiserver at %s, want the host's veth address %s", host, c.Network.HostIP)
	}

	// Inside each node's namespace: no route out, no default route, and
	// kube-proxy's nftables table (the host has none: compared below).
	for _, n := range c.Network.Nodes {
		assertNoRoute(t, "node "+n.Name, n.init.PID())
		out, err := exec.Command("nsenter", "-t", strconv.Itoa(n.init.PID()), "-n", c.bin("nft"), "list", "tables").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "table ip kube-proxy") {
			t.Errorf("node %s: no kube-proxy nftables table (%v): %s", n.Name, err, out)
		}
	}
	// kube-proxy's one masquerade rule: for packets it marked, which with
	// no clusterCIDR are a pod reaching itself through a Service (hairpin).
	out, _ := exec.Command("nsenter", "-t", strconv.Itoa(c.Network.Nodes[0].init.PID()), "-n", c.bin("nft"), "list", "ruleset").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "masquerade") || strings.Contains(line, "0x00004000") {
			t.Logf("node %s nftables: %s", c.Network.Nodes[0].Name, strings.TrimSpace(line))
		}
	}

	waitDefaultServiceAccount(ctx, t, c)
	var servers []*corev1.Pod
	for i, n := range c.Network.Nodes {
		name := "web-" + strconv.Itoa(i)
		pod := netprobePod(n, name, "serve")
		pod.Labels = map[string]string{"app": name}
		pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
		pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}}
		if err := c.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Selector: pod.Labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		if err := c.Client.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		servers = append(servers, pod)
	}
	for _, pod := range servers {
		if err := c.waitFor(ctx, 90*time.Second, "pod "+pod.Name+" ready", func() (bool, error) {
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			for _, cond := range pod.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !NetworkRange.Contains(net.ParseIP(pod.Status.PodIP)) {
			t.Errorf("pod %s has address %q, outside %s", pod.Name, pod.Status.PodIP, NetworkRange)
		}
	}
	// Inside a pod: no route out, routes to NetworkRange only.
	for i, pod := range servers {
		pids, err := c.Network.Nodes[i].ContainerPIDs(pod.Status.ContainerStatuses[0].ContainerID)
		if err != nil || len(pids) == 0 {
			t.Fatalf("pod %s's processes: %v %v", pod.Name, pids, err)
		}
		assertNoRoute(t, "pod "+pod.Name, pids[0])
	}

	// From a pod on each node: the other node's pod by address, both
	// Services by name (one backend local, one across), kube-dns by name,
	// no name outside the cluster zone, in-cluster config, no route out.
	var clients []*corev1.Pod
	for i, n := range c.Network.Nodes {
		other := servers[1-i]
		pod := netprobePod(n, "check-"+strconv.Itoa(i), "check",
			"-get=http://"+other.Status.PodIP+":8080/",
			"-get=http://web-0.default.svc/", "-get=http://web-1.default.svc."+ClusterDomain+"/",
			"-lookup=kube-dns.kube-system.svc", "-lookup=kubernetes.default.svc",
			"-no-lookup=example.com", "-no-lookup=web-0.default.svc.example.",
			"-in-cluster", "-no-route=192.0.2.1")
		if err := c.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, pod)
	}
	for i, pod := range clients {
		if err := c.waitFor(ctx, 120*time.Second, "pod "+pod.Name+" finished", func() (bool, error) {
			if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
				return false, err
			}
			return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
		}); err != nil {
			t.Fatal(err)
		}
		raw, err := c.Clientset.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{}).Do(ctx).Raw()
		if err != nil {
			t.Fatalf("pods/log of %s: %v", pod.Name, err)
		}
		t.Logf("%s on %s (%s):\n%s", pod.Name, pod.Spec.NodeName, pod.Status.PodIP, raw)
		if pod.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s failed: a check above says FAIL", pod.Name)
		}
		other := servers[1-i]
		for _, want := range []string{
			"ok get http://" + other.Status.PodIP + ":8080/: netprobe " + other.Name,
			"ok get http://web-0.default.svc/: netprobe web-0",
			"ok get http://web-1.default.svc." + ClusterDomain + "/: netprobe web-1",
			"ok lookup kube-dns.kube-system.svc: " + c.Network.DNSServiceIP.String(),
			"ok lookup kubernetes.default.svc: " + c.Network.KubernetesServiceIP.String(),
			"ok no-lookup example.com",
			"ok in-cluster: https://" + c.Network.KubernetesServiceIP.String() + ":443",
			"ok no-route 192.0.2.1",
		} {
			if !strings.Contains(string(raw), want) {
				t.Errorf("%s: no line %q", pod.Name, want)
			}
		}
	}
	// The kwok pods' namespace: a process there (as PodRunner starts a kwok
	// pod's sidecar) reaches Services by name through its own kube-proxy
	// and the cluster DNS, a pod on each node by address, and nothing out.
	hpStart := time.Now()
	if err := c.startHostPodsNet(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("the kwok pods' namespace and its kube-proxy up in %.1fs", time.Since(hpStart).Seconds())
	hp := c.Network.hostPods
	assertNoRoute(t, "the kwok pods' namespace", hp.holder.PID())
	bin, args := hp.command(filepath.Join(c.Dir, "bin", "netprobe"), "check",
		"-get=http://"+servers[0].Status.PodIP+":8080/", "-get=http://"+servers[1].Status.PodIP+":8080/",
		"-get=http://web-0.default.svc/", "-get=http://web-1.default.svc."+ClusterDomain+"/",
		"-lookup=kubernetes.default.svc", "-no-lookup=example.com", "-no-route=192.0.2.1")
	raw, err := exec.Command(bin, args...).CombinedOutput()
	t.Logf("from the kwok pods' namespace:\n%s", raw)
	if err != nil {
		t.Errorf("a check from the kwok pods' namespace failed: %v", err)
	}
	for _, want := range []string{
		"ok get http://web-0.default.svc/: netprobe web-0",
		"ok get http://web-1.default.svc." + ClusterDomain + "/: netprobe web-1",
		"ok lookup kubernetes.default.svc: " + c.Network.KubernetesServiceIP.String(),
		"ok no-route 192.0.2.1",
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the kwok pods' namespace: no line %q", want)
		}
	}
	if hosts, _ := os.ReadFile("/etc/resolv.conf"); strings.Contains(string(hosts), c.Network.DNSServiceIP.String()) {
		t.Errorf("the host's /etc/resolv.conf names the cluster DNS: the kwok pods' mount leaked:\n%s", hosts)
	}

	// The host routes into the nodes' pod CIDRs and the node link only.
	out, _ = exec.Command("ip", "route", "show", "dev", c.Network.HostLink).CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !NetworkRange.Contains(net.ParseIP(strings.SplitN(strings.Fields(line)[0], "/", 2)[0])) {
			t.Errorf("host route outside %s: %q", NetworkRange, line)
		}
	}

	pids := []int{c.Network.bridge.PID(), hp.holder.PID()}
	for _, n := range c.Network.Nodes {
		pids = append(pids, n.init.PID())
	}
	stopStart := time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %.1fs", time.Since(stopStart).Seconds())
	for _, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("process %d (a namespace holder or node-init) still exists after Stop", pid)
		}
	}
	for _, n := range c.Network.Nodes {
		for _, h := range cgroupHierarchies() {
			if _, err := os.Stat(filepath.Join(h, n.CgroupRoot)); err == nil {
				t.Errorf("cgroup %s left after Stop", filepath.Join(h, n.CgroupRoot))
			}
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), c.Dir) {
		t.Errorf("a mount under %s is visible on the host after Stop", c.Dir)
	}
	if left := processesMentioning(c.Dir); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	after := hostNetworkState(t, c.bin("nft"))
	for _, k := range sortedKeys(before, after) {
		if before[k] != after[k] {
			t.Errorf("host %s changed:\nbefore: %s\nafter:  %s", k, before[k], after[k])
		}
	}
	t.Logf("host state compared: %d items (interfaces, addresses, routes, rules, nftables, netns, sysctls), no difference", len(before))
}

// assertNoRoute runs the host's `ip route get 192.0.2.1` inside the network
// namespace of pid (it must find no route), and checks the namespace has
// no default route and routes only NetworkRange.
func assertNoRoute(t *testing.T, what string, pid int) {
	t.Helper()
	ns := []string{"nsenter", "-t", strconv.Itoa(pid), "-n", "ip"}
	out, err := exec.Command(ns[0], append(ns[1:], "route", "get", "192.0.2.1")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unreachable") {
		t.Errorf("%s: `ip route get 192.0.2.1` found a route (err %v): %s", what, err, out)
	} else {
		t.Logf("%s: ip route get 192.0.2.1: %s", what, strings.TrimSpace(string(out)))
	}
	out, err = exec.Command(ns[0], append(ns[1:], "-4", "route", "show", "table", "all")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: ip route: %v %s", what, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		if dst == "local" || dst == "broadcast" {
			dst = f[1]
		}
		if dst == "default" || !(NetworkRange.Contains(net.ParseIP(strings.SplitN(dst, "/", 2)[0])) || strings.HasPrefix(dst, "127.")) {
			t.Errorf("%s: route outside %s: %q", what, NetworkRange, line)
		}
	}
}

func netprobePod(n *RealNode, name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			NodeName:      n.Name,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   NetworkNodeTolerations(),
			Containers: []corev1.Container{{
				Name: "netprobe", Image: n.Image("tether-netprobe"), ImagePullPolicy: corev1.PullNever,
				Args: args, SecurityContext: RestrictedContainer(),
			}},
		},
	}
}

func waitDefaultServiceAccount(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	if err := c.waitFor(ctx, 60*time.Second, "ServiceAccount default/default", func() (bool, error) {
		var sa corev1.ServiceAccount
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "default"}, &sa)
		return err == nil, client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatal(err)
	}
}

// volatile strips what changes by itself from `ip` output (address
// lifetimes, route expiry).
var volatile = regexp.MustCompile(`(valid_lft|preferred_lft|expires) \S+`)

// hostNetworkState is what the cluster network must leave as it found:
// `ip` views of interfaces, addresses, routes and rules, the network
// namespaces, the nftables ruleset (Debian's nft, extracted), legacy
// iptables tables, and every network sysctl the network, the kubelets or
// kube-proxy could touch.
func hostNetworkState(t *testing.T, nft string) map[string]string {
	t.Helper()
	state := map[string]string{}
	cmds := map[string][]string{
		"interfaces": {"ip", "-o", "link", "show"},
		"addresses":  {"ip", "-o", "addr", "show"},
		"routes v4":  {"ip", "-4", "route", "show", "table", "all"},
		"routes v6":  {"ip", "-6", "route", "show", "table", "all"},
		"rules v4":   {"ip", "-4", "rule", "show"},
		"rules v6":   {"ip", "-6", "rule", "show"},
		"netns":      {"ip", "netns", "list"},
		"nftables":   {nft, "list", "ruleset"},
		"neighbours": {"ip", "neigh", "show", "nud", "permanent"},
		"bridges":    {"ip", "-o", "link", "show", "type", "bridge"},
	}
	for k, args := range cmds {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		state[k] = volatile.ReplaceAllString(string(out), "$1 -")
	}
	if b, err := os.ReadFile("/proc/net/ip_tables_names"); err == nil {
		state["iptables legacy tables"] = string(b)
	}
	var files []string
	for _, dir := range []string{"/proc/sys/net/ipv4/conf/all", "/proc/sys/net/ipv4/conf/default", "/proc/sys/net/ipv6/conf/all",
		"/proc/sys/net/ipv6/conf/default", "/proc/sys/net/bridge", "/proc/sys/net/netfilter"} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.IsDir() && !strings.Contains(e.Name(), "count") {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	files = append(files, "/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/nf_conntrack_max", "/proc/sys/net/ipv4/ip_local_port_range")
	for _, s := range kubeletSysctls {
		files = append(files, filepath.Join("/proc/sys", s))
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			state["sysctl "+strings.TrimPrefix(f, "/proc/sys/")] = string(bytes.TrimSpace(b))
		}
	}
	return state
}

func sortedKeys(a, b map[string]string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]string{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// logTails writes the end of every log of a failed test's cluster to the
// test log (the directory goes with the test).
func logTails(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		lines = lines[max(0, len(lines)-25):]
		t.Logf("--- %s (last %d lines)\n%s", e.Name(), len(lines), strings.Join(lines, "\n"))
	}
}
