package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/internal/images"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// The real nodes: kubelets v1.37.2 with containerd 2.x and Debian's runc,
// registered beside the kwok nodes, on the cluster network
// (network.go).
const (
	// RealNodeLabel (= NetworkNodeLabelValue) labels the real nodes and
	// taints them (NoSchedule), so only pods that tolerate it land there:
	// those admitted through the RealNodeQueue, whose ResourceFlavor adds
	// the node selector and the toleration.
	RealNodeLabel = "tether.dev/e2e-node"
	// RealNodeClusterQueue is the ClusterQueue whose flavor places pods on
	// the real nodes; Cluster.RealNodeQueue makes LocalQueues for it.
	RealNodeClusterQueue = "real-node"
	// TorchRuntime is Trainer's torch-distributed ClusterTrainingRuntime,
	// installed as Trainer ships it (manifests/base/runtimes).
	TorchRuntime = "torch-distributed"
)

// nodeBinaries are what the real node runs, from hack/testbin.sh node.
var nodeBinaries = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "cni/loopback"}

// RealNode is one of the cluster network's real nodes. Its containerd,
// kubelet and kube-proxy run under node-init, PID 1 of a private PID, mount
// and network namespace: every mount the node
// makes stays in it, and when node-init ends the kernel ends every process
// of the node, shims and containers included.
type RealNode struct {
	c *Cluster
	// Dir holds everything of the node (containerd's root and state, the
	// kubelet's root, pod logs, the directories bound over /var/lib,
	// /var/log and /run).
	Dir string
	// CgroupRoot is the kubelet's cgroup root (in every hierarchy); Stop
	// removes it.
	CgroupRoot string
	// KubeletAddr is the kubelet's serving address (the node's IP:10250).
	KubeletAddr string
	// Images are the images imported into containerd (make images).
	Images []images.Written
	// Tags are further names of imported images (ref, name), given by
	// `ctr images tag` after the imports: the installed mode's TeamRegistry.
	Tags [][2]string
	// ContainerdSocket is containerd's API socket (ctr --address).
	ContainerdSocket string
	// Name is the node's name (NetworkNodeName).
	Name string
	init *Process
	// net is the node's place on the cluster network (ClusterNetwork): its
	// own network namespace, address and pod CIDR.
	net *netNode
	// stopRegistered: Cluster.Stop stops the node once, however often it
	// was started (Restart).
	stopRegistered bool
	// restarts counts Restart's power-ons after a Kill.
	restarts int
}

// Image returns the reference of the image titled title (the last element
// of its repository, e.g. "tether-sidecar"), or "" if the node has none.
func (n *RealNode) Image(title string) string {
	for _, im := range n.Images {
		if path.Base(im.Name) == title {
			return im.Ref
		}
	}
	return ""
}

// start writes the node's files and starts node-init; a node of the
// cluster network gets a network namespace of its own, wired by the
// network before node-init runs its first step.
func (n *RealNode) start() error {
	c := n.c
	n.ContainerdSocket = filepath.Join(n.Dir, "containerd", "containerd.sock")
	spec, err := n.prepare()
	if err != nil {
		return err
	}
	if err := n.makeCgroupRoot(); err != nil {
		return err
	}
	if !n.stopRegistered {
		c.onStop(n.stop)
		n.stopRegistered = true
	}
	specPath := filepath.Join(n.Dir, "node-init.json")
	raw, _ := json.MarshalIndent(spec, "", "  ")
	if err := os.WriteFile(specPath, raw, 0o600); err != nil {
		return err
	}
	flags := uintptr(syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET)
	if n.init, err = startProcessIn(c.logDir(), "node-"+n.Name, filepath.Join(c.Dir, "bin", "node-init"), []string{"--spec=" + specPath},
		nil, flags); err != nil {
		return err
	}
	attach := n.net.network.attach
	if n.restarts > 0 {
		attach = n.net.network.reattach
	}
	if err := attach(n); err != nil {
		return fmt.Errorf("node %s's network: %w", n.Name, err)
	}
	return os.WriteFile(spec.WaitFile, nil, 0o600)
}

// waitReady waits until the node is Ready without its not-ready taint.
func (n *RealNode) waitReady(ctx context.Context) error {
	c := n.c
	return c.waitFor(ctx, 120*time.Second, "node "+n.Name+" Ready (see "+n.init.LogFile+" and "+n.logFile("kubelet")+")", func() (bool, error) {
		if exited, werr := n.init.Exited(); exited {
			return false, fmt.Errorf("node-init exited (%v); see %s", werr, n.init.LogFile)
		}
		var node corev1.Node
		if err := c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
			return false, nil
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return false, nil
			}
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// nodeImages reads bin/images/images.json, which `make images` writes.
func nodeImages() ([]images.Written, error) {
	file := filepath.Join(testenv.RepoRoot(), "bin", "images", "images.json")
	list, err := images.ReadList(file)
	if err != nil {
		return nil, fmt.Errorf("the real node runs Tether's images: %w; run `make images` first (`make e2e` does)", err)
	}
	for _, im := range list.Images {
		if _, err := os.Stat(im.Path); err != nil {
			return nil, fmt.Errorf("image %s: %w; run `make images` again", im.Ref, err)
		}
	}
	return list.Images, nil
}

// logFile is the log of one of the node's processes: <logs>/<node>-<name>.log.
func (n *RealNode) logFile(name string) string {
	return filepath.Join(n.c.logDir(), n.Name+"-"+name+".log")
}

// resolvedDir follows a symlink to a directory (the cni link in the assets).
func resolvedDir(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// cgroupHierarchies lists the mounted cgroup v1 hierarchies (and the v2
// unified one), each a directory under /sys/fs/cgroup.
func cgroupHierarchies() []string {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"} // pure cgroup v2
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join("/sys/fs/cgroup", e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// makeCgroupRoot creates the kubelet's cgroup root in every hierarchy (the
// kubelet requires it to exist); a cpuset cgroup starts with its parent's
// CPUs and memory nodes, or no task could join it.
func (n *RealNode) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.CgroupRoot)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w (the real node needs root and a writable /sys/fs/cgroup)", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if cur, _ := os.ReadFile(filepath.Join(dir, f)); strings.TrimSpace(string(cur)) == "" {
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// stop ends node-init (it stops the kubelet, then containerd; the kernel
// ends the shims and containers left in its PID namespace), kills by PID
// anything still in the node's cgroups, and removes them.
func (n *RealNode) stop() error {
	var errs []error
	if n.init != nil {
		errs = append(errs, n.init.Stop(40*time.Second))
	}
	errs = append(errs, n.clearCgroups(20*time.Second))
	return errors.Join(errs...)
}

// clearCgroups removes the node's cgroups (removeCgroups), again every
// 200ms until within has passed: a killed process leaves its cgroup only
// once the kernel has reaped it.
func (n *RealNode) clearCgroups(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		left, err := n.removeCgroups()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("real node %s: cgroups not removed (%d processes left): %w", n.Name, left, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// removeCgroups SIGKILLs every process in the node's cgroups and removes
// them, deepest first; it returns how many processes it found.
func (n *RealNode) removeCgroups() (int, error) {
	found := 0
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, n.CgroupRoot)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			for _, pid := range cgroupPIDs(d) {
				found++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("%s: %w", d, err))
			}
		}
	}
	return found, errors.Join(errs...)
}

func cgroupPIDs(dir string) []int {
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(raw)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ContainerPIDs returns the host PIDs of the processes of a container of a
// pod on the real node (its ID as in the pod's containerStatuses, with or
// without the containerd:// prefix), found through its cgroup.
func (n *RealNode) ContainerPIDs(containerID string) ([]int, error) {
	id := containerID[strings.LastIndex(containerID, "/")+1:]
	for _, h := range cgroupHierarchies() {
		var pids []int
		found := false
		_ = filepath.WalkDir(filepath.Join(h, n.CgroupRoot), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == id {
				found = true
				pids = append(pids, cgroupPIDs(p)...)
				return filepath.SkipDir
			}
			return nil
		})
		if found {
			return pids, nil
		}
	}
	return nil, fmt.Errorf("no cgroup for container %s under %s", id, n.CgroupRoot)
}

// ContainerMemoryUsage is a container's memory cgroup as the kernel keeps it.
type ContainerMemoryUsage struct {
	// Peak is the cgroup's peak usage since it was made or last reset
	// (ResetContainerPeak), page cache included: a container reading a
	// large file fills its limit with cache the kernel reclaims.
	Peak int64
	// Anon is the processes' own (anonymous) memory now: what the limit
	// must hold, and what an OOM kill is about.
	Anon int64
	// Limit is the cgroup's limit (the kubelet's, from limits.memory; -1: none).
	Limit int64
	// OOMKills counts the processes the kernel's OOM killer killed in it.
	OOMKills int64
}

// ContainerMemory reads the container's memory cgroup (cgroup v1 or v2).
func (n *RealNode) ContainerMemory(containerID string) (ContainerMemoryUsage, error) {
	var u ContainerMemoryUsage
	dir, err := n.memoryCgroup(containerID)
	if err != nil {
		return u, err
	}
	read := func(names ...string) (int64, error) {
		for _, name := range names {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				continue
			}
			s := strings.TrimSpace(string(b))
			if s == "max" {
				return -1, nil
			}
			return strconv.ParseInt(s, 10, 64)
		}
		return 0, fmt.Errorf("none of %v in %s", names, dir)
	}
	// A "key value" line of a flat keyed file.
	field := func(file, key string) (int64, error) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == key {
				return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
		return 0, fmt.Errorf("no %s in %s/%s", key, dir, file)
	}
	v1 := fileExists(filepath.Join(dir, "memory.max_usage_in_bytes"))
	if v1 {
		if u.Peak, err = read("memory.max_usage_in_bytes"); err == nil {
			if u.Limit, err = read("memory.limit_in_bytes"); err == nil {
				if u.Anon, err = field("memory.stat", "rss"); err == nil {
					u.OOMKills, err = field("memory.oom_control", "oom_kill")
				}
			}
		}
		return u, err
	}
	if u.Peak, err = read("memory.peak"); err == nil {
		if u.Limit, err = read("memory.max"); err == nil {
			if u.Anon, err = field("memory.stat", "anon"); err == nil {
				u.OOMKills, err = field("memory.events", "oom_kill")
			}
		}
	}
	return u, err
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ResetContainerPeak starts the container's peak memory over from its
// current usage (cgroup v1's memory.max_usage_in_bytes; on v2 a write to
// memory.peak, kernel 6.12+).
func (n *RealNode) ResetContainerPeak(containerID string) error {
	dir, err := n.memoryCgroup(containerID)
	if err != nil {
		return err
	}
	for _, name := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("0\n"), 0o600); err == nil {
			return nil
		}
	}
	return fmt.Errorf("cannot reset the peak memory of %s", dir)
}

// memoryCgroup is the container's directory in the memory hierarchy (v1)
// or the unified one (v2).
func (n *RealNode) memoryCgroup(containerID string) (string, error) {
	id := containerID[strings.LastIndex(containerID, "/")+1:]
	hierarchies := cgroupHierarchies()
	for _, h := range hierarchies {
		if len(hierarchies) > 1 && filepath.Base(h) != "memory" {
			continue // v1: only the memory controller's hierarchy
		}
		var found string
		_ = filepath.WalkDir(filepath.Join(h, n.CgroupRoot), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == id {
				found = p
				return filepath.SkipAll
			}
			return nil
		})
		if found != "" {
			return found, nil
		}
	}
	return "", fmt.Errorf("no memory cgroup for container %s under %s", id, n.CgroupRoot)
}

// KillContainer sends sig to every process of the container, as the kernel's
// OOM killer or a crash would end it; the kubelet sees the exit and restarts
// it by the pod's restart policy.
func (n *RealNode) KillContainer(containerID string, sig syscall.Signal) error {
	pids, err := n.ContainerPIDs(containerID)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		return fmt.Errorf("container %s has no processes", containerID)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// installRealNodeQueues (a step after Kueue) creates, with Kueue, the real
// nodes' flavor and ClusterQueue.
func (c *Cluster) installRealNodeQueues(ctx context.Context) error {
	if !c.Opts.Kueue {
		return nil
	}
	queues, err := decodeObjects(realNodeQueues)
	if err != nil {
		return err
	}
	return c.retry(ctx, 60*time.Second, func() error { return apply(ctx, c.Client, queues...) })
}

// installTorchRuntime creates Trainer's own torch-distributed
// ClusterTrainingRuntime from its module's manifests, unchanged.
func (c *Cluster) installTorchRuntime(ctx context.Context) error {
	mod, err := moduleDir("github.com/kubeflow/trainer/v2", c.Opts.TrainerVersion)
	if err != nil {
		return err
	}
	objs, err := readObjects(filepath.Join(mod, "manifests", "base", "runtimes", "torch_distributed.yaml"))
	if err != nil {
		return fmt.Errorf("Trainer %s's torch-distributed runtime: %w", c.Opts.TrainerVersion, err)
	}
	if len(objs) != 1 || objs[0].GetKind() != "ClusterTrainingRuntime" || objs[0].GetName() != TorchRuntime {
		return fmt.Errorf("Trainer %s's torch_distributed.yaml: want one ClusterTrainingRuntime %s, got %d objects", c.Opts.TrainerVersion, TorchRuntime, len(objs))
	}
	return c.retry(ctx, 30*time.Second, func() error { return apply(ctx, c.Client, objs...) })
}

// RealNodes are the cluster network's nodes (nil without Options.RealNode).
func (c *Cluster) RealNodes() []*RealNode {
	if c.Network == nil {
		return nil
	}
	return c.Network.Nodes
}

// RealNodeNamed is the real node called name, or nil (a kwok node).
func (c *Cluster) RealNodeNamed(name string) *RealNode {
	for _, n := range c.RealNodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// buildNodeInit builds node-init into <Dir>/bin.
func (c *Cluster) buildNodeInit() error {
	return goBuild(filepath.Join(c.Dir, "bin"), "./test/framework/localcluster/node-init")
}

// InNode is path p as the node's own processes see it: the kubelet's Secret
// and projected volumes are tmpfs mounts inside the node's private mount
// namespace, invisible at the same path on the host; /proc/<pid>/root of
// node-init reaches them.
func (n *RealNode) InNode(p string) string {
	return filepath.Join("/proc", strconv.Itoa(n.init.PID()), "root", p)
}
