package localcluster

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/tether-dev/tether/test/framework/localcluster/nodespec"
)

// What node-init is given to run a real node: the node's directories and
// the host paths bound over, containerd's and the kubelet's configuration,
// and the steps that start them.

// kubeletSysctls are the host sysctls the kubelet sets at start
// (pkg/kubelet/cm setupKernelTunables); each gets a value file bound over it
// inside the node's mount namespace, so the host keeps its own.
var kubeletSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// prepare writes the node's directories, certificates and configuration,
// and returns node-init's spec.
func (n *RealNode) prepare() (*nodespec.Spec, error) {
	dirs := map[string]string{}
	for _, d := range []string{"var-lib", "var-log", "run", "sysctl", "containerd/root", "containerd/state", "containerd/opt",
		"runc", "cni/net.d", "kubelet", "pod-logs", "volume-plugins", "pki"} {
		dirs[d] = filepath.Join(n.Dir, d)
		if err := os.MkdirAll(dirs[d], 0o700); err != nil {
			return nil, err
		}
	}
	if err := n.c.CA.writeCert(dirs["pki"], "kubelet", certRequest{commonName: n.Name,
		ips: []net.IP{n.net.ip}, dnsNames: []string{"localhost"}, usage: x509.ExtKeyUsageServerAuth}); err != nil {
		return nil, err
	}
	binds, err := n.binds(dirs)
	if err != nil {
		return nil, err
	}
	containerdPath, err := n.writeContainerdConfig(dirs)
	if err != nil {
		return nil, err
	}
	kubeletPath, err := n.writeKubeletConfig(dirs)
	if err != nil {
		return nil, err
	}
	steps, err := n.steps(dirs, containerdPath, kubeletPath)
	if err != nil {
		return nil, err
	}
	return &nodespec.Spec{Binds: binds, Steps: steps, StopGrace: "15s", WaitFile: filepath.Join(n.Dir, "network-ready")}, nil
}

// binds are the node's own /var/lib, /var/log and /run, and a copy of each
// sysctl the kubelet sets, so that it changes the node's and not the host's.
func (n *RealNode) binds(dirs map[string]string) ([]nodespec.Bind, error) {
	binds := []nodespec.Bind{{Source: dirs["var-lib"], Target: "/var/lib"}, {Source: dirs["var-log"], Target: "/var/log"}, {Source: dirs["run"], Target: "/run"}}
	for _, s := range kubeletSysctls {
		host := filepath.Join("/proc/sys", s)
		v, err := os.ReadFile(host)
		if err != nil {
			continue // not on this kernel: nothing for the kubelet to change
		}
		f := filepath.Join(dirs["sysctl"], strings.ReplaceAll(s, "/", "."))
		if err := os.WriteFile(f, v, 0o644); err != nil {
			return nil, err
		}
		binds = append(binds, nodespec.Bind{Source: f, Target: host})
	}
	return binds, nil
}

// writeContainerdConfig writes the node's CNI configuration and
// containerd's, and returns the latter's path.
func (n *RealNode) writeContainerdConfig(dirs map[string]string) (string, error) {
	c := n.c
	if err := os.WriteFile(filepath.Join(dirs["cni/net.d"], "10-tether.conflist"), []byte(n.net.cniConfig()), 0o644); err != nil {
		return "", err
	}
	pause := n.Image("tether-pause")
	if pause == "" {
		return "", errors.New("bin/images has no tether-pause image: run `make images` again")
	}
	containerdConfig := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = ""
[metrics]
  address = ""
[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[6]q
[plugins.'io.containerd.cri.v1.runtime']
  # The VM lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    runtime_path = %[7]q
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %[8]q
      Root = %[9]q
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[10]q]
    conf_dir = %[11]q
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, dirs["containerd/root"], dirs["containerd/state"], n.ContainerdSocket, n.ContainerdSocket+".ttrpc", dirs["containerd/opt"],
		pause, c.bin("containerd-shim-runc-v2"), c.bin("runc"), dirs["runc"], resolvedDir(c.bin("cni")), dirs["cni/net.d"])
	containerdPath := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(containerdPath, []byte(containerdConfig), 0o600); err != nil {
		return "", err
	}
	return containerdPath, nil
}

// writeKubeletConfig writes the node's resolv.conf and the kubelet's
// configuration, and returns the latter's path.
func (n *RealNode) writeKubeletConfig(dirs map[string]string) (string, error) {
	resolv := filepath.Join(n.Dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte(n.net.resolvConf()), 0o644); err != nil {
		return "", err
	}
	kubeletConfig := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[12]s
port: %[1]s
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %[2]q
authorization:
  mode: AlwaysAllow
tlsCertFile: %[3]q
tlsPrivateKeyFile: %[4]q
containerRuntimeEndpoint: unix://%[5]s
cgroupDriver: cgroupfs
cgroupRoot: %[6]q
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
podLogsDir: %[7]q
volumePluginDir: %[8]q
resolvConf: %[9]q
registerWithTaints:
- key: %[10]s
  value: %[13]s
  effect: NoSchedule
# The kubelet refreshes Secret volumes on its pod sync; the default minute
# made token-reissue scenarios wait that long.
syncFrequency: 10s
# A shared CI disk must not evict the scenarios' pods.
evictionHard:
  memory.available: 50Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
`, portOf(n.KubeletAddr), filepath.Join(dirs["pki"], "ca.crt"), filepath.Join(dirs["pki"], "kubelet.crt"), filepath.Join(dirs["pki"], "kubelet.key"),
		n.ContainerdSocket, n.CgroupRoot, dirs["pod-logs"], dirs["volume-plugins"], resolv, RealNodeLabel, NetworkNodeLabelValue, n.net.ip.String(), NetworkNodeLabelValue)
	kubeletConfig += n.net.kubeletConfig()
	kubeletPath := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(kubeletPath, []byte(kubeletConfig), 0o600); err != nil {
		return "", err
	}
	return kubeletPath, nil
}

// steps are what node-init runs in the node: containerd, the image imports
// and tags, the kubelet, and kube-proxy.
func (n *RealNode) steps(dirs map[string]string, containerdPath, kubeletPath string) ([]nodespec.Step, error) {
	c := n.c
	// Any pull fails at once (a proxy on a closed loopback port): every
	// image the node runs is imported. The apiserver is on NetworkRange.
	env := []string{"PATH=" + c.Assets + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + n.Dir,
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=" + NetworkRange.String(), "TMPDIR=" + os.TempDir()}
	steps := []nodespec.Step{{Name: "containerd", Path: c.bin("containerd"), Args: []string{"--config=" + containerdPath},
		Env: env, Log: n.logFile("containerd"), WaitSocket: n.ContainerdSocket}}
	for _, im := range n.Images {
		steps = append(steps, nodespec.Step{Name: "import " + im.Ref, Path: c.bin("ctr"),
			Args: []string{"--address=" + n.ContainerdSocket, "--namespace=k8s.io", "images", "import", "--local", im.Path},
			Env:  env, Log: n.logFile("ctr-import"), RunToCompletion: true})
	}
	for _, t := range n.Tags {
		steps = append(steps, nodespec.Step{Name: "tag " + t[1], Path: c.bin("ctr"),
			Args: []string{"--address=" + n.ContainerdSocket, "--namespace=k8s.io", "images", "tag", "--force", t[0], t[1]},
			Env:  env, Log: n.logFile("ctr-import"), RunToCompletion: true})
	}
	kubeletArgs := []string{"--config=" + kubeletPath, "--kubeconfig=" + c.Kubeconfig, "--hostname-override=" + n.Name,
		"--node-labels=" + RealNodeLabel + "=" + NetworkNodeLabelValue, "--root-dir=" + dirs["kubelet"],
		"--cert-dir=" + dirs["pki"], "--v=2", "--node-ip=" + n.net.ip.String()}
	steps = append(steps, nodespec.Step{Name: "kubelet", Path: c.bin("kubelet"), Env: env, Log: n.logFile("kubelet"), Args: kubeletArgs})
	kp, err := n.net.kubeProxyStep(n, env)
	if err != nil {
		return nil, err
	}
	return append(steps, kp), nil
}
