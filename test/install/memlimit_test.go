package install

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/pkg/controlplane"
)

// controlPlaneContainer is the chart's name for the control plane's container.
const controlPlaneContainer = "control-plane"

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
