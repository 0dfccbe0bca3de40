package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// startControllerManager runs the controllers a TrainJob needs: Jobs,
// garbage collection of owned objects, namespaces, node lifecycle (it
// lifts the not-ready taint a new node is created with once kwok reports
// it Ready; kwok renews the node leases), and the binding of
// PersistentVolumeClaims to PersistentVolumes (the real node's scenarios
// keep artifacts on a hostPath PersistentVolume across pods), and
// ResourceQuota usage (quota admission enforces a quota only once this
// controller has written its status; scenario 9 holds pods back with one).
func (c *Cluster) startControllerManager(ctx context.Context) error {
	controllers := "job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,pod-garbage-collector-controller,ttl-after-finished-controller,node-lifecycle-controller,persistentvolume-binder-controller,resourcequota-controller"
	args := []string{"--concurrent-job-syncs=10"}
	if c.Network != nil {
		controllers, args = c.Network.controllerManager(controllers, args)
	}
	if c.Opts.FastNodeLoss {
		controllers += ",taint-eviction-controller"
		args = append(args, "--node-monitor-grace-period="+NodeMonitorGrace.String())
	}
	_, err := c.start("kube-controller-manager", c.bin("kube-controller-manager"), c.kubeComponentArgs(append([]string{"--controllers=" + controllers}, args...)...))
	return err
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	_, err := c.start("kube-scheduler", c.bin("kube-scheduler"), c.kubeComponentArgs())
	return err
}

// kubeComponentArgs are the flags kube-controller-manager and
// kube-scheduler share here: admin credentials, one instance (no leader
// election), no serving port, then extra.
func (c *Cluster) kubeComponentArgs(extra ...string) []string {
	return append([]string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--v=1",
	}, extra...)
}

// startKwok creates the fake nodes and runs kwok with stages that make pods
// Running; bound trainer pods are left to PodRunner to finish and delete.
func (c *Cluster) startKwok(ctx context.Context) error {
	stages := filepath.Join(c.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o600); err != nil {
		return err
	}
	if _, err := c.start("kwok", c.bin("kwok"), []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--config=" + stages,
		"--node-lease-duration-seconds=40",
		// Fake pod addresses, never dialed: from 198.18.0.0/15, the range
		// reserved for network tests, apart from the cluster network's
		// 198.18.0.0/16.
		"--cidr=198.19.0.0/16",
	}); err != nil {
		return err
	}
	for i := range c.Opts.Nodes {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        fmt.Sprintf("kwok-node-%d", i),
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": fmt.Sprintf("kwok-node-%d", i), "kubernetes.io/os": "linux"},
			},
			Status: corev1.NodeStatus{Allocatable: nodeResources(), Capacity: nodeResources()},
		}
		if err := c.Client.Create(ctx, node); err != nil {
			return err
		}
		node.Status.Allocatable, node.Status.Capacity = nodeResources(), nodeResources()
		if err := c.Client.Status().Update(ctx, node); err != nil {
			return err
		}
	}
	return c.waitFor(ctx, 60*time.Second, "kwok nodes Ready", func() (bool, error) {
		var nodes corev1.NodeList
		if err := c.Client.List(ctx, &nodes); err != nil {
			return false, err
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == c.Opts.Nodes, nil
	})
}

func nodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// startJobSet installs JobSet's CRDs and webhooks (behind its Service on the
// cluster network, by loopback URL without it) and runs its manager with
// certificates from the cluster CA.
func (c *Cluster) startJobSet(ctx context.Context) error {
	mod, err := moduleDir("sigs.k8s.io/jobset", JobSetVersion)
	if err != nil {
		return err
	}
	addr, err := c.installAPI(ctx, filepath.Join(mod, "config", "components", "crd", "bases"),
		filepath.Join(mod, "config", "components", "webhook", "manifests.yaml"), "jobset-", jobSetWebhookService)
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: %s
  port: %s
  certDir: %s
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: "0"
`, hostOf(addr), portOf(addr), c.CertDir)
	path := filepath.Join(c.Dir, "jobset-config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	p, err := c.start("jobset", c.bin("jobset"), []string{"--config=" + path, "--kubeconfig=" + c.Kubeconfig,
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=info"})
	if err != nil {
		return err
	}
	return waitTCP(ctx, p, addr, 60*time.Second)
}

// startTrainer installs Trainer's CRDs and webhooks and runs its manager
// (v2.3.0 from a config file; v2.0.0 through StartTrainerV20), then creates
// the ClusterTrainingRuntime the tests use.
func (c *Cluster) startTrainer(ctx context.Context) error {
	mod, err := moduleDir("github.com/kubeflow/trainer/v2", c.Opts.TrainerVersion)
	if err != nil {
		return err
	}
	addr, err := c.installAPI(ctx, filepath.Join(mod, "manifests", "base", "crds"),
		filepath.Join(mod, "manifests", "base", "webhook", "manifests.yaml"), "trainer-", trainerWebhookService)
	if err != nil {
		return err
	}
	if c.Opts.TrainerVersion == TrainerV20 {
		if err := c.startTrainerV20(ctx, addr); err != nil {
			return err
		}
	} else {
		if err := c.startTrainerV23(ctx, addr); err != nil {
			return err
		}
	}
	runtimeObjs, err := decodeObjects(clusterTrainingRuntime)
	if err != nil {
		return err
	}
	if c.Opts.TrainerVersion != TrainerV20 {
		// Kueue mode's scenario runs on the shared (Trainer v2.3) cluster only.
		declared, err := decodeObjects(declaredSidecarRuntime)
		if err != nil {
			return err
		}
		runtimeObjs = append(runtimeObjs, declared...)
	}
	// The runtime is validated by Trainer's webhook, so this also proves the
	// webhook path works.
	if err := c.retry(ctx, 30*time.Second, func() error { return apply(ctx, c.Client, runtimeObjs...) }); err != nil {
		return err
	}
	if c.Opts.TrainerVersion == TrainerV20 {
		return nil
	}
	// The real nodes' scenarios run on Trainer's runtime as shipped.
	return c.installTorchRuntime(ctx)
}

func (c *Cluster) startTrainerV23(ctx context.Context, addr string) error {
	config := fmt.Sprintf(`apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
webhook:
  port: %s
  host: %s
leaderElection:
  leaderElect: false
certManagement:
  enable: false
`, portOf(addr), hostOf(addr))
	path := filepath.Join(c.Dir, "trainer-config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	// Trainer reads its serving certificate from
	// $TMPDIR/k8s-webhook-server/serving-certs (controller-runtime's default).
	tmp := filepath.Join(c.Dir, "trainer-tmp")
	if err := c.writeServingCert(filepath.Join(tmp, "k8s-webhook-server", "serving-certs")); err != nil {
		return err
	}
	p, err := c.start("trainer", c.bin("trainer-controller-manager"), []string{"--config=" + path, "--kubeconfig=" + c.Kubeconfig,
		"--feature-gates=TrainJobStatus=false"}, "TMPDIR="+tmp)
	if err != nil {
		return err
	}
	return waitTCP(ctx, p, addr, 60*time.Second)
}

func (c *Cluster) startTrainerV20(ctx context.Context, addr string) error {
	bin := c.bin("trainer-controller-manager-v2.0.0")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s not built: run `hack/testbin.sh trainer-controller-manager-v2.0.0`", bin)
	}
	work := filepath.Join(c.Dir, "trainer-v2.0.0")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	return startTrainerV20Hook(ctx, c, bin, work, addr)
}

// startKueue installs Kueue's CRDs (conversion webhooks by URL), the
// webhooks of the integrations in use, runs Kueue, and creates a
// ResourceFlavor and a ClusterQueue named "cluster-queue".
func (c *Cluster) startKueue(ctx context.Context) error {
	mod, err := moduleDir("sigs.k8s.io/kueue", KueueVersion)
	if err != nil {
		return err
	}
	addr, err := c.componentWebhookAddr()
	if err != nil {
		return err
	}
	crds, err := readObjects(filepath.Join(mod, "config", "components", "crd", "bases"))
	if err != nil {
		return err
	}
	for _, crd := range crds {
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		if len(versions) > 1 {
			if c.Network != nil {
				err = conversionService(crd, kueueWebhookService, c.CA.CertPEM)
			} else {
				err = conversionURL(crd, addr, c.CA.CertPEM)
			}
			if err != nil {
				return err
			}
		}
	}
	if err := c.installCRDs(ctx, crds); err != nil {
		return err
	}
	if err := c.installWebhooks(ctx, filepath.Join(mod, "config", "components", "webhook", "manifests.yaml"), "kueue-", addr, kueueWebhookService,
		"kueue-x-k8s-io", "batch-v1-job", "trainer-kubeflow-org"); err != nil {
		return err
	}
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	// Kueue without internal certificate management reads its metrics
	// certificate from a fixed /etc path; with it, its rotator keeps a
	// pre-populated Secret and cert dir that verify (ours, from the cluster CA).
	certDir := filepath.Join(c.Dir, "kueue-certs")
	if err := c.writeServingCert(certDir); err != nil {
		return err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kueue-system", Name: "kueue-webhook-server-cert"}, Data: map[string][]byte{}}
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		b, err := os.ReadFile(filepath.Join(certDir, f))
		if err != nil {
			return err
		}
		secret.Data[f] = b
	}
	secret.Data["ca.key"] = c.CA.KeyPEM
	if err := c.Client.Create(ctx, secret); err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
webhook:
  host: %s
  port: %s
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
integrations:
  frameworks:
  - batch/job
  - trainer.kubeflow.org/trainjob
`, hostOf(addr), portOf(addr), certDir)
	path := filepath.Join(c.Dir, "kueue-config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	p, err := c.start("kueue", c.bin("kueue"), []string{"--config=" + path, "--kubeconfig=" + c.Kubeconfig,
		"--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info"})
	if err != nil {
		return err
	}
	if err := waitTCP(ctx, p, addr, 90*time.Second); err != nil {
		return err
	}
	objs, err := decodeObjects(kueueQueues)
	if err != nil {
		return err
	}
	return c.retry(ctx, 60*time.Second, func() error { return apply(ctx, c.Client, objs...) })
}

// LocalQueue creates a LocalQueue named name in ns, pointing at cluster-queue.
func (c *Cluster) LocalQueue(ctx context.Context, ns, name string) error {
	return c.localQueue(ctx, ns, name, "cluster-queue")
}

// RealNodeQueue creates a LocalQueue named name in ns whose TrainJobs run on
// the real node (ClusterQueue RealNodeClusterQueue).
func (c *Cluster) RealNodeQueue(ctx context.Context, ns, name string) error {
	if c.Network == nil {
		return errors.New("the cluster has no real nodes: start it with Options.RealNode")
	}
	return c.localQueue(ctx, ns, name, RealNodeClusterQueue)
}

// BulkQueue creates LocalQueue name in namespace ns on ClusterQueue
// bulk-queue (12 CPUs: many small jobs at once, apart from cluster-queue).
func (c *Cluster) BulkQueue(ctx context.Context, ns, name string) error {
	return c.localQueue(ctx, ns, name, "bulk-queue")
}

func (c *Cluster) localQueue(ctx context.Context, ns, name, clusterQueue string) error {
	objs, err := decodeObjects([]byte(strings.NewReplacer("$NS", ns, "$NAME", name, "$CLUSTER_QUEUE", clusterQueue).Replace(localQueue)))
	if err != nil {
		return err
	}
	return c.retry(ctx, 30*time.Second, func() error { return apply(ctx, c.Client, objs...) })
}

// installAPI installs a component's CRDs (crdDir) and its webhook
// configurations (webhookFile, renamed with prefix), pointed at a free
// loopback address it returns for the component to serve on.
func (c *Cluster) installAPI(ctx context.Context, crdDir, webhookFile, prefix string, svc componentService) (string, error) {
	crds, err := readObjects(crdDir)
	if err != nil {
		return "", err
	}
	if err := c.installCRDs(ctx, crds); err != nil {
		return "", err
	}
	addr, err := c.componentWebhookAddr()
	if err != nil {
		return "", err
	}
	return addr, c.installWebhooks(ctx, webhookFile, prefix, addr, svc)
}

// installWebhooks applies the webhook configurations in file, renamed with
// prefix: on the cluster network by Service reference (svc, which it
// creates in front of addr: exposeComponent), else by URL, https://addr<path>.
func (c *Cluster) installWebhooks(ctx context.Context, file, prefix, addr string, svc componentService, keep ...string) error {
	objs, err := readObjects(file)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if c.Network != nil {
			err = webhookService(o, prefix+o.GetName(), svc, c.CA.CertPEM, keep...)
		} else {
			err = webhookURLs(o, prefix+o.GetName(), addr, c.CA.CertPEM, keep...)
		}
		if err != nil {
			return err
		}
	}
	if c.Network != nil {
		if err := c.exposeComponent(ctx, svc, addr); err != nil {
			return err
		}
	}
	return apply(ctx, c.Client, objs...)
}

// retry calls fn until it succeeds or timeout passes (a component's webhook
// may take a moment to serve after its port opens).
func (c *Cluster) retry(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitFor polls cond until true, an error, or timeout.
func (c *Cluster) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startTrainerV20Hook runs Trainer v2.0.0 (see trainer_v20.go).
func startTrainerV20Hook(ctx context.Context, c *Cluster, bin, work, addr string) error {
	stop, err := StartTrainerV20(ctx, TrainerV20Config{
		Binary:      bin,
		Kubeconfig:  c.Kubeconfig,
		CertDir:     c.CertDir,
		WorkDir:     work,
		WebhookAddr: addr,
		LogFile:     filepath.Join(c.logDir(), "trainer.log"),
	})
	if err != nil {
		return err
	}
	c.onStop(stop)
	return nil
}
