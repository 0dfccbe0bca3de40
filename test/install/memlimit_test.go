package install

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// controlPlaneContainer is the chart's name for the control plane's container.
const controlPlaneContainer = "control-plane"

// TestPeakMemoryUnderChartLimits: a bound job writes a 1 GiB checkpoint and
// 200 small files while the sidecar and both control-plane replicas run
// under the limits the chart and the injector set by default (limits.memory
// 1Gi, the sidecar's 128Mi, read from their memory cgroups, not from the
// specs); the job succeeds with every file in the store, nothing is OOM
// killed or restarted, each container's own (anonymous) memory stays under
// 75% of its limit, and its peak is logged against the limit with the
// cgroup's (page cache included: reading a 1 GiB file fills a 128Mi cgroup
// with cache the kernel reclaims). (Before the resize
// test below: it changes a replica's limit.)
func TestPeakMemoryUnderChartLimits(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestPeakMemoryUnderChartLimits: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	const (
		ns, name        = "peak-memory", "large-checkpoint"
		checkpointBytes = 1 << 30
		smallFiles      = 200
		cpLimit         = 1 << 30   // charts/tether values.yaml resources.limits.memory
		sidecarLimit    = 128 << 20 // mutate.DefaultSidecarResources
	)
	type measured struct {
		what        string
		node        *localcluster.RealNode
		containerID string
		limit       int64
	}
	var containers []measured
	pods, err := cluster.Installed.ControlPlanePods(ctx)
	if err != nil || len(pods) != 2 {
		t.Fatalf("the installed control plane's pods: %v (%d)", err, len(pods))
	}
	for _, p := range pods {
		containers = append(containers, measured{what: "control plane " + p.Name, node: cluster.RealNodeNamed(p.Spec.NodeName),
			containerID: containerID(t, p.Status.ContainerStatuses, controlPlaneContainer), limit: cpLimit})
	}
	reset := func(m measured) {
		t.Helper()
		if err := m.node.ResetContainerPeak(m.containerID); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range containers {
		reset(m)
	}
	jobID := createBoundJob(t, ns, name, localcluster.TrainerPlan{Steps: 2, CheckpointEvery: 2, CheckpointBytes: checkpointBytes,
		ModelBytes: 1 << 20, SmallFiles: smallFiles, StepInterval: 500 * time.Millisecond})
	pod := waitPod(t, ns, name, 120*time.Second, "the trainer pod running", func(p *corev1.Pod) error {
		return running(p, mutate.SidecarName, "node")
	})
	sidecar := measured{what: "sidecar " + pod.Name, node: cluster.RealNodeNamed(pod.Spec.NodeName),
		containerID: containerID(t, pod.Status.InitContainerStatuses, mutate.SidecarName), limit: sidecarLimit}
	reset(sidecar) // its start is not the upload's
	containers = append(containers, sidecar)
	// The kernel keeps each cgroup's peak; it is sampled while the job
	// runs, since the sidecar's cgroup goes with its container.
	// Anonymous memory (the processes' own) is what the limit must hold:
	// its peak is the largest sample; the kernel's own peak counts page
	// cache too.
	seen := make([]localcluster.ContainerMemoryUsage, len(containers))
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			for i, m := range containers {
				if u, err := m.node.ContainerMemory(m.containerID); err == nil {
					mu.Lock()
					u.Anon = max(u.Anon, seen[i].Anon)
					seen[i] = u
					mu.Unlock()
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	wb := waitBinding(t, ns, name, 300*time.Second, "Succeeded with a verified manifest", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != tetherv1.PhaseSucceeded || wb.Status.Artifacts == nil || !wb.Status.Artifacts.ManifestVerified {
			return fmt.Errorf("phase %s/%s, artifacts %+v", wb.Status.Phase, wb.Status.Reason, wb.Status.Artifacts)
		}
		return nil
	})
	// Every file the trainer wrote (its closing list), in the store's own
	// files with its MD5: the checkpoint, the small files, the model and
	// the progress file.
	raw, err := cluster.Clientset.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "node"}).Do(ctx).Raw()
	if err != nil {
		t.Fatal(err)
	}
	wrote := standinFiles(string(raw))
	onDisk := storeFiles(t, filepath.Join(cluster.Installed.StoreDir, localcluster.StoreBucket, jobID))
	if len(wrote) < smallFiles+2 || wrote["checkpoints/step-0002.pt"] == "" {
		t.Fatalf("the trainer's file list has %d files (checkpoint %q), want the checkpoint, %d small files and the model", len(wrote), wrote["checkpoints/step-0002.pt"], smallFiles)
	}
	for rel, sum := range wrote {
		if onDisk[rel] != sum {
			t.Errorf("%s: the trainer wrote MD5 %s, the store holds %q", rel, sum, onDisk[rel])
		}
	}
	if len(onDisk) != len(wrote) || int(wb.Status.Artifacts.Files) != len(wrote) {
		t.Errorf("the store holds %d files and the manifest lists %d; the trainer wrote %d", len(onDisk), wb.Status.Artifacts.Files, len(wrote))
	}
	var cur corev1.Pod
	if err := cluster.Client.Get(ctx, crclient.ObjectKeyFromObject(pod), &cur); err != nil {
		t.Fatal(err)
	}
	for _, st := range append(cur.Status.InitContainerStatuses, cur.Status.ContainerStatuses...) {
		if st.RestartCount > 0 || (st.LastTerminationState.Terminated != nil && st.LastTerminationState.Terminated.Reason == "OOMKilled") {
			t.Errorf("container %s of %s restarted %d times (last: %+v)", st.Name, pod.Name, st.RestartCount, st.LastTerminationState.Terminated)
		}
	}
	close(stop)
	<-sampled
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	for i, m := range containers {
		u := seen[i]
		if u.Limit == 0 {
			t.Errorf("%s: its memory cgroup was never read", m.what)
			continue
		}
		if u.Limit != m.limit {
			t.Errorf("%s runs under a memory limit of %d bytes, not the default %d", m.what, u.Limit, m.limit)
		}
		if u.OOMKills > 0 {
			t.Errorf("%s: %d OOM kills", m.what, u.OOMKills)
		}
		if u.Anon*4 > u.Limit*3 {
			t.Errorf("%s: its own memory peaked at %.1f MiB, above 75%% of its %.0f MiB limit", m.what, mib(u.Anon), mib(u.Limit))
		}
		logf("%s: own (anonymous) memory peaked at %.1f MiB of its %.0f MiB limit (%.0f%%), the cgroup with page cache at %.1f MiB; OOM kills %d",
			m.what, mib(u.Anon), mib(u.Limit), 100*float64(u.Anon)/float64(u.Limit), mib(u.Peak), u.OOMKills)
	}
	for _, p := range pods {
		var now corev1.Pod
		if err := cluster.Client.Get(ctx, crclient.ObjectKeyFromObject(&p), &now); err != nil {
			t.Fatal(err)
		}
		if n := restartCount(&now); n != restartCount(&p) {
			t.Errorf("control-plane pod %s restarted during the upload (%d, was %d)", p.Name, n, restartCount(&p))
		}
	}
}

// containerID is the runtime's id of container name among statuses.
func containerID(t *testing.T, statuses []corev1.ContainerStatus, name string) string {
	t.Helper()
	for _, s := range statuses {
		if s.Name == name && s.ContainerID != "" {
			return s.ContainerID
		}
	}
	t.Fatalf("no running container %s (%+v)", name, statuses)
	return ""
}

// TestInstalledGoMemoryLimitFollowsLimitsMemory: each installed replica's
// Go runtime knows its container's memory limit (GOMEMLIMIT at
// controlplane.MemoryLimitRatio of limits.memory, as /metrics says:
// go_gc_gomemlimit_bytes), and follows it when limits.memory changes: one
// replica is resized in place (pods/resize, no restart) from the chart's
// 1Gi to 1280Mi, and its runtime's limit follows within the control
// plane's refresh. /metrics is scraped as Prometheus would, by a
// ServiceAccount bound to the chart's tether-metrics-reader.
func TestInstalledGoMemoryLimitFollowsLimitsMemory(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestInstalledGoMemoryLimitFollowsLimitsMemory: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	pods, err := cluster.Installed.ControlPlanePods(ctx)
	if err != nil || len(pods) == 0 {
		t.Fatalf("the installed control plane's pods: %v (%d)", err, len(pods))
	}
	token := metricsReaderToken(t, "install-metrics", "prometheus")
	for _, p := range pods {
		limit := containerLimit(t, &p)
		want := int64(float64(limit) * controlplane.MemoryLimitRatio)
		eventually(t, 30*time.Second, p.Name+"'s Go memory limit", func() error {
			got, err := scrapeGauge(ctx, p.Status.PodIP, token, "go_gc_gomemlimit_bytes")
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("go_gc_gomemlimit_bytes %d, want %d (%.0f%% of limits.memory %d)", got, want, controlplane.MemoryLimitRatio*100, limit)
			}
			return nil
		})
	}

	p := pods[0]
	resized := resource.MustParse("1280Mi")
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":%q,"resources":{"limits":{"memory":%q}}}]}}`, controlPlaneContainer, resized.String())
	if _, err := cluster.Clientset.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resizing %s's limits.memory in place to %s: %v", p.Name, resized.String(), err)
	}
	want := int64(float64(resized.Value()) * controlplane.MemoryLimitRatio)
	restarts := restartCount(&p)
	eventually(t, 120*time.Second, p.Name+"'s Go memory limit after the resize", func() error {
		var cur corev1.Pod
		if err := cluster.Client.Get(ctx, crclient.ObjectKeyFromObject(&p), &cur); err != nil {
			return err
		}
		if n := restartCount(&cur); n != restarts {
			return fmt.Errorf("the container restarted (%d restarts, was %d): the resize must be in place", n, restarts)
		}
		got, err := scrapeGauge(ctx, cur.Status.PodIP, token, "go_gc_gomemlimit_bytes")
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("go_gc_gomemlimit_bytes %d, want %d (resize status %v)", got, want, cur.Status.Conditions)
		}
		return nil
	})
	logf("TestInstalledGoMemoryLimitFollowsLimitsMemory: %s's Go memory limit followed limits.memory to %s (%d bytes) in place", p.Name, resized.String(), want)
}

func containerLimit(t *testing.T, p *corev1.Pod) int64 {
	t.Helper()
	for _, c := range p.Spec.Containers {
		if c.Name == controlPlaneContainer {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
				return q.Value()
			}
		}
	}
	t.Fatalf("pod %s has no container %s with limits.memory", p.Name, controlPlaneContainer)
	return 0
}

func restartCount(p *corev1.Pod) int32 {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == controlPlaneContainer {
			return s.RestartCount
		}
	}
	return -1
}

// metricsReaderToken is the token of a new ServiceAccount ns/name bound to
// the chart's ClusterRole tether-metrics-reader (get on /metrics), as a
// platform team binds Prometheus's.
func metricsReaderToken(t *testing.T, ns, name string) string {
	t.Helper()
	return createAndToken(t, ns, name,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tether-metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}})
}

// scrapeGauge reads one unlabeled gauge from a replica's /metrics (HTTPS
// on the metrics port, by pod IP: the host routes into the pod CIDRs).
// The metrics server's certificate is controller-runtime's self-signed
// one, so it is not verified here: what is checked is the value.
func scrapeGauge(ctx context.Context, podIP, token, name string) (int64, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(podIP, "8080")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics of %s: %s", podIP, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("%s has no %s in its /metrics (%v)", podIP, name, sc.Err())
}
