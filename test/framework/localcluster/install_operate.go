package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tether-dev/tether/internal/images"
	"github.com/tether-dev/tether/internal/version"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// What an operator does to an installed Tether in its first months, with
// the tools a platform team uses: helm, kubectl (drain, cordon) and a
// second build of the control plane in its registry.

// BuildControlPlane builds the control plane's image once more, at
// version ver (`go run ./hack/images -only tether-control-plane`: its
// binary linked with internal/version.Version=ver, so another build, with
// another digest), imports it into every real node's containerd and tags
// it under TeamRegistry, as a release pushed to the team's mirror. It
// returns the reference the install names it by.
func (in *Installed) BuildControlPlane(ctx context.Context, ver string) (string, error) {
	c := in.c
	out := filepath.Join(c.Dir, "images-"+ver)
	title := images.ControlPlane(version.Registry).Title()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/images", "-out", out, "-version", ver, "-only", title)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if raw, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the control plane at %s: %w\n%s", ver, err, raw)
	}
	list, err := images.ReadList(filepath.Join(out, "images.json"))
	if err != nil {
		return "", err
	}
	if len(list.Images) != 1 || list.Images[0].Name != images.ControlPlane(version.Registry).Repository {
		return "", fmt.Errorf("building the control plane at %s: %s lists %d images", ver, out, len(list.Images))
	}
	w := list.Images[0]
	ref := teamRef(w.Ref)
	for _, n := range c.RealNodes() {
		if err := n.ctr(ctx, "images", "import", "--local", w.Path); err != nil {
			return "", err
		}
		if err := n.ctr(ctx, "images", "tag", "--force", w.Ref, ref); err != nil {
			return "", err
		}
	}
	c.logf("control plane %s built and imported into the real nodes as %s (%s, %.1fs)", ver, ref, w.Digest, time.Since(start).Seconds())
	return ref, nil
}

// ctr runs containerd's ctr against the node's containerd (namespace
// k8s.io, the kubelet's).
func (n *RealNode) ctr(ctx context.Context, args ...string) error {
	args = append([]string{"--address=" + n.ContainerdSocket, "--namespace=k8s.io"}, args...)
	raw, err := exec.CommandContext(ctx, n.c.bin("ctr"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node %s: ctr %s: %w\n%s", n.Name, strings.Join(args[2:], " "), err, raw)
	}
	return nil
}

// ApplyCRDs is the step the chart's README asks for before an upgrade
// (Helm installs a chart's crds/ once and never upgrades them):
// `kubectl apply -f charts/tether/crds/`.
func (in *Installed) ApplyCRDs(ctx context.Context) (string, error) {
	return in.c.Kubectl(ctx, "apply", "-f", filepath.Join(testenv.RepoRoot(), "charts", "tether", "crds"))
}

// Upgrade runs `helm upgrade` of the release with the values it was
// installed with (--reuse-values) and sets (key=value, as --set takes
// them), without --wait: the caller watches the roll. A set of
// image.tag records the new control-plane image in ControlPlaneImage.
func (in *Installed) Upgrade(ctx context.Context, sets ...string) (string, error) {
	if in.Method != InstallHelm {
		return "", fmt.Errorf("Upgrade: Tether was installed by %q, not helm", in.Method)
	}
	args := []string{"upgrade", in.Release, filepath.Join(testenv.RepoRoot(), "charts", "tether"),
		"--namespace", ControlPlaneNamespace, "--reuse-values"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := in.helmRun(ctx, args...)
	if err != nil {
		return out, fmt.Errorf("helm upgrade: %w\n%s", err, out)
	}
	for _, s := range sets {
		if tag, ok := strings.CutPrefix(s, "image.tag="); ok {
			repo, _, _ := strings.Cut(in.ControlPlaneImage, ":")
			in.ControlPlaneImage = repo + ":" + tag
		}
	}
	return out, nil
}

// Kubectl runs kubectl against the cluster as its administrator and
// returns its combined output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	start := time.Now()
	raw, err := cmd.CombinedOutput()
	c.logf("$ kubectl %s (%.1fs)", strings.Join(args, " "), time.Since(start).Seconds())
	if err != nil {
		return string(raw), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, raw)
	}
	return string(raw), nil
}

// Kill ends the node at once, as a power loss does: SIGKILL of node-init,
// PID 1 of the node's PID namespace, so the kernel kills every process of
// the node (kubelet, containerd, kube-proxy, shims, containers) together,
// and its network namespace goes with them. The Node object stays, as a
// lost node's does, for the node lifecycle controller to mark (see
// Options.FastNodeLoss); the node is not started again, and Cluster.Stop
// removes what is left of it.
func (n *RealNode) Kill(ctx context.Context) error {
	if err := syscall.Kill(n.init.PID(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("node %s: SIGKILL of node-init (pid %d): %w", n.Name, n.init.PID(), err)
	}
	select {
	case <-n.init.Done():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("node %s: node-init (pid %d) still running 30s after SIGKILL", n.Name, n.init.PID())
	}
	n.c.logf("node %s killed (node-init pid %d and every process of the node)", n.Name, n.init.PID())
	return nil
}
