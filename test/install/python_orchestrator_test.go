package install

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/pythonenv"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// TestPythonOrchestrator runs examples/python-orchestrator from the host,
// with the tether package installed into a venv of Debian's Python, as a
// tenant with only its namespace's RBAC and nothing but a kubeconfig: it
// creates a labeled TrainJob in a Kueue LocalQueue on the real node,
// follows it to Succeeded, downloads its model through the API server's
// read API (byte for byte what the node's manifest in the store lists),
// cancels a second job (its Workload deactivated, no longer admitted, no
// trainer pod left, its binding Failed/Cancelled); and the same tenant
// reading another namespace's job is refused by the read API.
func TestPythonOrchestrator(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestPythonOrchestrator: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	if !cluster.Installed.ReadAPI {
		t.Fatal("the installed control plane has no read API: the harness installs it with readAPI.enabled=true")
	}
	// The client installed as its users install it (test/integration/python
	// does the same).
	pythonPath, err := pythonenv.Packages(testenv.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	venv, err := pythonenv.Install(testenv.RepoRoot(), t.TempDir(), pythonPath)
	if err != nil {
		t.Fatal(err)
	}

	// Another team's job, which the tenant must not read.
	const other, otherNS = "other", "py-orch-other"
	createBoundJob(t, otherNS, other, localcluster.TrainerPlan{Steps: 2, StepInterval: 500 * time.Millisecond})

	const ns, queue = "py-orch", "real-node-queue"
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.RealNodeQueue(ctx, ns, queue); err != nil {
		t.Fatal(err)
	}
	kubeconfig := tenantKubeconfig(t, ns, "orchestrator")

	trainPlan := localcluster.TrainerPlan{Steps: 6, CheckpointEvery: 3, StepInterval: 500 * time.Millisecond}
	// Long enough to be cancelled while it runs.
	cancelPlan := localcluster.TrainerPlan{Steps: 600, CheckpointEvery: 300, StepInterval: time.Second}
	model := filepath.Join(t.TempDir(), "model.safetensors")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(venv, "bin", "python"), append([]string{
			filepath.Join(testenv.RepoRoot(), "examples", "python-orchestrator", "orchestrator.py"),
			"--kubeconfig", kubeconfig, "--namespace", ns, "--queue", queue,
			"--image", cluster.RealNodes()[0].Image("tether-trainer-standin"), "--command", "/trainer-standin",
			"--runtime", localcluster.TorchRuntime, "--cpu", "250m", "--memory", "256Mi",
			"--args", strings.Join(trainPlan.Args(jobconfig.DefaultArtifactPath), " "),
			"--cancel-args", strings.Join(cancelPlan.Args(jobconfig.DefaultArtifactPath), " "),
			"--name", "py", "--model", "model/final.safetensors", "--out", model, "--timeout", "300"}, args...)...)
		// Nothing but the kubeconfig, and Debian's packages for the venv.
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + pythonPath, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	ran := time.Now()
	out, err := run()
	logf("orchestrator.py ran %.1fs:\n%s", time.Since(ran).Seconds(), out)
	if err != nil {
		t.Fatalf("orchestrator.py: %v\n%s", err, out)
	}
	checkDownloadedModel(t, ns, "py-train", "model/final.safetensors", model)
	checkCancelled(t, ns, "py-cancel")

	// The same tenant, reading another namespace's model: refused by the
	// API server for workerbindings/objects.
	out, err = run("--read-other", otherNS+"/"+other)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "orchestrator: ReadForbidden:") ||
		!strings.Contains(out, "workerbindings/objects") {
		t.Errorf("orchestrator.py --read-other %s/%s: %v\n%s\nwant exit 1 with ReadForbidden for workerbindings/objects", otherNS, other, err, out)
	}
	logf("the tenant of %s reading %s/%s: %s", ns, otherNS, other, strings.TrimSpace(out))
}

// checkDownloadedModel compares the file the orchestrator downloaded with
// node 0's manifest of job ns/name in the installed store's volume and the
// stored object's own bytes.
func checkDownloadedModel(t *testing.T, ns, name, path, downloaded string) {
	t.Helper()
	wb := &tetherv1.WorkerBinding{}
	if err := cluster.Client.Get(context.Background(), crclient.ObjectKey{Namespace: ns, Name: name}, wb); err != nil {
		t.Fatal(err)
	}
	if wb.Status.Phase != tetherv1.PhaseSucceeded {
		t.Errorf("binding %s/%s: phase %s/%s after the orchestrator waited for Succeeded", ns, name, wb.Status.Phase, wb.Status.Reason)
	}
	bucket := filepath.Join(cluster.Installed.StoreDir, localcluster.StoreBucket)
	raw, err := os.ReadFile(filepath.Join(bucket, filepath.FromSlash(upload.ManifestKey(wb.Spec.JobID, 0))))
	if err != nil {
		t.Fatalf("node 0's manifest of %s/%s in the store: %v", ns, name, err)
	}
	var m upload.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("node 0's manifest: %v\n%s", err, raw)
	}
	want := ""
	for _, f := range m.Files {
		if f.Path == path {
			want = f.MD5
		}
	}
	b, err := os.ReadFile(downloaded)
	if err != nil {
		t.Fatalf("the downloaded model: %v", err)
	}
	sum := md5.Sum(b)
	got := hex.EncodeToString(sum[:])
	stored := storeFiles(t, filepath.Join(bucket, wb.Spec.JobID))[path]
	if want == "" || got != want || got != stored {
		t.Errorf("downloaded %s: MD5 %s (%d bytes); the stored manifest lists %q, the store holds %q", path, got, len(b), want, stored)
	}
	logf("%s/%s: %s downloaded by the orchestrator, %d bytes, MD5 %s as the stored manifest lists", ns, name, path, len(b), got)
}

// checkCancelled checks what the orchestrator's cancel left of job
// ns/name: its Kueue Workload deactivated and not admitted, its binding
// Failed/Cancelled, and (once the pods have terminated) no trainer pod.
func checkCancelled(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var wls unstructured.UnstructuredList
	wls.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	wls.SetKind("WorkloadList")
	if err := cluster.Client.List(ctx, &wls, crclient.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var wl *unstructured.Unstructured
	for i := range wls.Items {
		for _, o := range wls.Items[i].GetOwnerReferences() {
			if o.Kind == "TrainJob" && o.Name == name {
				wl = &wls.Items[i]
			}
		}
	}
	if wl == nil {
		t.Fatalf("no Kueue Workload owned by TrainJob %s/%s", ns, name)
	}
	if active, found, _ := unstructured.NestedBool(wl.Object, "spec", "active"); !found || active {
		t.Errorf("Workload %s: spec.active %v (set %v), want false", wl.GetName(), active, found)
	}
	conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	for _, c := range conds {
		cm, _ := c.(map[string]any)
		if (cm["type"] == "Admitted" || cm["type"] == "QuotaReserved") && cm["status"] == "True" {
			t.Errorf("Workload %s still %s after the cancel: %v", wl.GetName(), cm["type"], cm)
		}
	}
	wb := &tetherv1.WorkerBinding{}
	if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: ns, Name: name}, wb); err != nil {
		t.Fatal(err)
	}
	if wb.Status.Phase != tetherv1.PhaseFailed || wb.Status.Reason != tetherv1.ReasonCancelled {
		t.Errorf("binding %s/%s: %s/%s (%s), want Failed/Cancelled", ns, name, wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
	}
	eventually(t, 120*time.Second, "no trainer pod of the cancelled job left", func() error {
		var pods corev1.PodList
		if err := cluster.Client.List(ctx, &pods, crclient.InNamespace(ns), crclient.MatchingLabels{trainjob.JobSetNameLabel: name}); err != nil {
			return err
		}
		if len(pods.Items) > 0 {
			return fmt.Errorf("%d pods left, %s is %s", len(pods.Items), pods.Items[0].Name, pods.Items[0].Status.Phase)
		}
		return nil
	})
	logf("%s/%s: cancelled, Workload %s deactivated and not admitted, binding Failed/Cancelled, no trainer pod left", ns, name, wl.GetName())
}

// tenantKubeconfig is a kubeconfig file for ServiceAccount ns/name, which
// may do in ns what the orchestrator does and nothing else: create and
// follow TrainJobs, command and read their bindings, deactivate their
// Kueue Workloads, and read their files through the read API (the shipped
// ClusterRole tether-artifact-reader, bound in ns).
func tenantKubeconfig(t *testing.T, ns, name string) string {
	t.Helper()
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	token := createAndToken(t, ns, name,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: []string{"create", "get", "list", "watch", "patch"}},
			{APIGroups: []string{"tether.dev"}, Resources: []string{"workerbindings"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads"}, Verbs: []string{"list", "watch", "patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-reader", Namespace: ns}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "tether-artifact-reader"}})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cluster.Config.Host, CertificateAuthorityData: cluster.Config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: ns}
	kc.CurrentContext = name
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
