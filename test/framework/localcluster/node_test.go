package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// TestRealNodeAlone starts only what the real nodes need (the cluster
// network, etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// the nodes and CoreDNS), runs one pod from the stand-in image on pod
// networking (an address from the node's pod CIDR) to Succeeded, reads its
// log through the kubelet, and checks that Stop leaves no process, cgroup
// or mount behind.
func TestRealNodeAlone(t *testing.T) {
	if os.Getenv("TETHER_E2E") != "1" {
		t.Skip("set TETHER_E2E=1 (make e2e) to run a real kubelet and containerd")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the real node needs root (namespaces, cgroups, mounts)")
	}
	ctx := context.Background()
	start := time.Now()
	c := &Cluster{Opts: Options{Log: t.Logf, RealNode: true}}
	var err error
	if c.Dir, err = os.MkdirTemp("", "tether-node-test-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(c.Dir) })
	// Only the binaries this test runs (assets() wants the whole e2e set).
	if c.Assets, err = testenv.Assets(); err != nil {
		t.Fatal(err)
	}
	if c.CA, err = newCA(); err != nil {
		t.Fatal(err)
	}
	hostSysctls := map[string]string{}
	for _, k := range kubeletSysctls {
		v, _ := os.ReadFile(filepath.Join("/proc/sys", k))
		hostSysctls[k] = string(v)
	}
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
	t.Logf("nodes Ready %.1fs after start", time.Since(start).Seconds())
	n := c.Network.Nodes[0]
	// The kubelet set its kernel tunables in the node's own value files; the
	// host's are as they were.
	panicFile, _ := os.ReadFile(filepath.Join(n.Dir, "sysctl", "kernel.panic"))
	if strings.TrimSpace(string(panicFile)) != "10" {
		t.Errorf("the kubelet did not write kernel.panic=10 into the node's value file (it holds %q)", panicFile)
	}
	for k, v := range hostSysctls {
		if now, _ := os.ReadFile(filepath.Join("/proc/sys", k)); string(now) != v {
			t.Errorf("host sysctl %s changed from %q to %q", k, v, now)
		}
	}

	if err := c.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "standin"},
		Spec: corev1.PodSpec{
			NodeName:      n.Name,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Key: RealNodeLabel, Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "trainer", Image: n.Image("tether-trainer-standin"), ImagePullPolicy: corev1.PullNever,
				Args:         []string{"--artifacts=/work", "--steps=2", "--checkpoint-every=1", "--step-interval=100ms"},
				VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	created := time.Now()
	if err := c.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := c.waitFor(ctx, 90*time.Second, "pod Succeeded", func() (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		if pod.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod failed: %+v", pod.Status)
		}
		return pod.Status.Phase == corev1.PodSucceeded, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("pod created → Succeeded in %.1fs", time.Since(created).Seconds())
	if ip := net.ParseIP(pod.Status.PodIP); pod.Spec.HostNetwork || ip == nil || !n.net.podCIDR.Contains(ip) {
		t.Fatalf("pod IP %q (hostNetwork %v), want one from node %s's pod CIDR %s", pod.Status.PodIP, pod.Spec.HostNetwork, n.Name, n.net.podCIDR)
	}
	raw, err := c.Clientset.CoreV1().Pods("default").GetLogs("standin", &corev1.PodLogOptions{}).Do(ctx).Raw()
	if err != nil {
		t.Fatalf("pods/log through the kubelet: %v", err)
	}
	if !strings.Contains(string(raw), "trainer-standin: final model written") || !strings.Contains(string(raw), "uid 65532") {
		t.Fatalf("stand-in log: %s", raw)
	}

	initPID := n.init.PID()
	stopStart := time.Now()
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %.1fs", time.Since(stopStart).Seconds())
	if _, err := os.Stat(filepath.Join("/proc", fmt.Sprint(initPID))); err == nil {
		t.Errorf("node-init (pid %d) still exists after Stop", initPID)
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, n.CgroupRoot)); err == nil {
			t.Errorf("cgroup %s left after Stop", filepath.Join(h, n.CgroupRoot))
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), c.Dir) {
		t.Errorf("a mount under %s is visible on the host after Stop", c.Dir)
	}
	if left := processesMentioning(c.Dir); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
}

// processesMentioning lists pids whose command line contains s.
func processesMentioning(s string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), s) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}
