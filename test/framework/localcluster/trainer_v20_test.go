package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/tether-dev/tether/test/framework/certs"
	"github.com/tether-dev/tether/test/framework/testenv"
)

var (
	trainerV20CTRGVR    = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "clustertrainingruntimes"}
	trainerV20TrainJobs = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	trainerV20JobSets   = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
)

// TestTrainerV20 runs Trainer v2.0.0's manager against envtest's apiserver
// through StartTrainerV20 and checks that its controller and webhook work.
func TestTrainerV20(t *testing.T) {
	if os.Getenv("TETHER_E2E") != "1" {
		t.Skip("set TETHER_E2E=1 to run Trainer v2.0.0 against a local kube-apiserver")
	}
	if os.Geteuid() != 0 {
		t.Skip("StartTrainerV20 needs root (network and mount namespaces)")
	}
	start := time.Now()
	root := testenv.RepoRoot()
	out, err := exec.Command("bash", filepath.Join(root, "hack", "testbin.sh"), "--print-dir").Output()
	if err != nil {
		t.Fatalf("hack/testbin.sh --print-dir: %v", err)
	}
	assets := strings.TrimSpace(string(out))
	binary := filepath.Join(assets, "trainer-controller-manager-v2.0.0")
	if _, err := os.Stat(binary); err != nil {
		t.Skipf("%s not built: run `hack/testbin.sh trainer-controller-manager-v2.0.0`", binary)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			t.Skipf("%s not built: run `hack/testbin.sh`", filepath.Join(assets, b))
		}
	}
	trainerMod := trainerV20ModDir(t, root, "github.com/kubeflow/trainer/v2@v2.0.0")
	jobsetMod := trainerV20ModDir(t, root, "sigs.k8s.io/jobset@v0.12.0")

	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{
			filepath.Join(trainerMod, "manifests", "base", "crds"),
			filepath.Join(jobsetMod, "config", "components", "crd", "bases"),
		},
		ErrorIfCRDPathMissing: true,
	}
	if _, err := env.Start(); err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	t.Logf("envtest up after %v", time.Since(start).Round(time.Millisecond))

	dir := t.TempDir()
	admin, err := env.AddUser(envtest.User{Name: "tether-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "certs")
	caPEM := trainerV20TestCerts(t, certDir)
	webhookAddr := trainerV20FreeAddr(t)

	restCfg := admin.Config()
	cs := kubernetes.NewForConfigOrDie(restCfg)
	dyn := dynamic.NewForConfigOrDie(restCfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Trainer's validating webhooks, by URL with our CA.
	raw, err := os.ReadFile(filepath.Join(trainerMod, "manifests", "base", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.Unmarshal(raw, vwc); err != nil {
		t.Fatal(err)
	}
	vwc.Name = TrainerV20WebhookConfigurationName // as kustomize names it
	for i := range vwc.Webhooks {
		u := "https://" + webhookAddr + *vwc.Webhooks[i].ClientConfig.Service.Path
		vwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: caPEM}
	}
	if len(vwc.Webhooks) != 3 {
		t.Fatalf("expected 3 validating webhooks in v2.0.0's manifests, got %d", len(vwc.Webhooks))
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	workDir := filepath.Join(dir, "trainer")
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(workDir, "manager.log")
	t0 := time.Now()
	stop, err := StartTrainerV20(ctx, TrainerV20Config{
		Binary:      binary,
		Kubeconfig:  kubeconfig,
		CertDir:     certDir,
		WorkDir:     workDir,
		WebhookAddr: webhookAddr,
		LogFile:     logFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stop()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("manager log:\n%s", b)
		}
	})
	t.Logf("trainer v2.0.0 ready after %v", time.Since(t0).Round(time.Millisecond))
	pids := []int{trainerV20ReadPID(t, filepath.Join(workDir, TrainerV20RelayPIDFile)), trainerV20ReadPID(t, filepath.Join(workDir, TrainerV20ManagerPIDFile))}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("pid %d not running: %v", pid, err)
		}
	}

	// The manager's own namespaces: only loopback, a private /tmp.
	mgrPID := pids[1]
	if host, _ := os.Readlink("/proc/self/ns/net"); host != "" {
		if ns, _ := os.Readlink("/proc/" + strconv.Itoa(mgrPID) + "/ns/net"); ns == host {
			t.Errorf("manager shares the host's network namespace (%s)", ns)
		}
	}
	if devs, err := os.ReadFile("/proc/" + strconv.Itoa(mgrPID) + "/net/dev"); err == nil {
		for _, line := range strings.Split(string(devs), "\n")[2:] {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && name != "lo" {
				t.Errorf("manager's network namespace has interface %q", name)
			}
		}
	}

	// The CA rotator injected a bundle that still holds our CA.
	got, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b := got.Webhooks[0].ClientConfig.CABundle; !strings.Contains(string(b), strings.TrimSpace(string(caPEM))) {
		t.Errorf("caBundle of %s lost our CA:\n%s", vwc.Name, b)
	}

	ns := "trainer-v20"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runtime := trainerV20Object(t, `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: tether-v20
spec:
  mlPolicy:
    numNodes: 1
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                containers:
                - name: node
                  image: busybox
                  command: ["true"]
`)
	// Admitted through Trainer's webhook (failurePolicy Fail).
	if _, err := dyn.Resource(trainerV20CTRGVR).Create(ctx, runtime, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterTrainingRuntime: %v", err)
	}
	job := trainerV20Object(t, `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: job-v20
  namespace: trainer-v20
spec:
  runtimeRef:
    name: tether-v20
    apiGroup: trainer.kubeflow.org
    kind: ClusterTrainingRuntime
`)
	created, err := dyn.Resource(trainerV20TrainJobs).Namespace(ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create TrainJob: %v", err)
	}
	t1 := time.Now()
	var js *unstructured.Unstructured
	for js == nil {
		js, err = dyn.Resource(trainerV20JobSets).Namespace(ns).Get(ctx, "job-v20", metav1.GetOptions{})
		if err != nil {
			js = nil
			select {
			case <-ctx.Done():
				t.Fatalf("no JobSet job-v20: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	t.Logf("JobSet created %v after the TrainJob", time.Since(t1).Round(time.Millisecond))
	owned := false
	for _, o := range js.GetOwnerReferences() {
		owned = owned || (o.Kind == "TrainJob" && o.Name == "job-v20" && o.UID == created.GetUID())
	}
	if !owned {
		t.Errorf("JobSet not owned by the TrainJob: %v", js.GetOwnerReferences())
	}
	rjs, _, _ := unstructured.NestedSlice(js.Object, "spec", "replicatedJobs")
	if len(rjs) != 1 || rjs[0].(map[string]any)["name"] != "node" {
		t.Errorf("JobSet replicatedJobs: %v", rjs)
	}

	// A TrainJob whose runtime does not exist is denied by the webhook.
	bad := job.DeepCopy()
	bad.SetName("job-v20-bad")
	_ = unstructured.SetNestedField(bad.Object, "does-not-exist", "spec", "runtimeRef", "name")
	_, err = dyn.Resource(trainerV20TrainJobs).Namespace(ns).Create(ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "validator.trainjob.trainer.kubeflow.org") ||
		!strings.Contains(err.Error(), "must be created before the TrainJob is created") {
		t.Fatalf("TrainJob with a missing runtime: want denial by validator.trainjob.trainer.kubeflow.org, got %v", err)
	}
	t.Logf("denied as expected: %v", err)

	t2 := time.Now()
	stopped = true
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped in %v", time.Since(t2).Round(time.Millisecond))
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after stop (kill 0: %v)", pid, err)
		}
	}
	if c, err := net.DialTimeout("tcp", webhookAddr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after stop", webhookAddr)
	}
	if err := stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

func trainerV20ModDir(t *testing.T, root, modVersion string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", modVersion, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("go mod download %s: no Dir in %s", modVersion, out)
	}
	return m.Dir
}

// trainerV20TestCerts writes ca.crt, tls.crt and tls.key (127.0.0.1, localhost)
// to dir and returns the CA's PEM.
func trainerV20TestCerts(t *testing.T, dir string) []byte {
	t.Helper()
	ca := certs.NewCA(t)
	if err := ca.Server(t, "localhost", "127.0.0.1").WriteFiles(dir, "tls"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM
}

func trainerV20FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func trainerV20ReadPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("%s: bad pid %q", path, b)
	}
	return pid
}

func trainerV20Object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}
