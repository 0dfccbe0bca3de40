package install

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// TestInstallHelm: with Tether installed by `helm install` (TestMain), a
// labeled TrainJob on Trainer's torch-distributed runtime as shipped, one
// node, the trainer stand-in, runs on a real node with the sidecar of the
// image the install named, which registers at the URL the chart sets (the
// Service's DNS name); it goes to Succeeded. Every file the trainer wrote
// is in the installed store with the trainer's MD5 (read from the store's
// volume, not through Tether), and the Go client, as an orchestrator with
// only its namespace's RBAC, lists and downloads them through a replica of
// the installed control plane: from the host, which routes to pod IPs, at a
// replica's pod IP with the Service's name for TLS.
func TestInstallHelm(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestInstallHelm: %.1fs", time.Since(start).Seconds()) }()
	runInstalledJob(t, cluster.Installed, "install-helm", "sidecar.image")
}

// runInstalledJob runs TestInstallHelm's job on Tether as in installed it,
// in a new namespace ns; imageSetBy names how the install set the sidecar
// image (for the message when the injected one differs).
func runInstalledJob(t *testing.T, in *localcluster.Installed, ns, imageSetBy string) {
	t.Helper()
	ctx := context.Background()
	c := cluster
	const name = "installed-finetune"
	jobID := createBoundJob(t, ns, name, localcluster.TrainerPlan{Steps: 20, CheckpointEvery: 5, StepInterval: time.Second})

	pod := waitPod(t, ns, name, 120*time.Second, "the injected trainer pod running on a real node", func(p *corev1.Pod) error {
		if !trainjob.IsInjected(p) {
			return fmt.Errorf("not injected: %v", p.Annotations)
		}
		n := c.RealNodeNamed(p.Spec.NodeName)
		if n == nil {
			return fmt.Errorf("on node %q, not a real node", p.Spec.NodeName)
		}
		if ip := net.ParseIP(p.Status.PodIP); ip == nil || !n.PodCIDR().Contains(ip) {
			return fmt.Errorf("pod IP %q not from %s's pod CIDR", p.Status.PodIP, n.Name)
		}
		return running(p, mutate.SidecarName, "node")
	})
	env := testenv.SidecarEnv(pod)
	if got := env[names.EnvServerURL]; got != localcluster.ControlPlaneBindingURL {
		t.Errorf("sidecar's %s = %q, want the chart's %s", names.EnvServerURL, got, localcluster.ControlPlaneBindingURL)
	}
	if got := pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1].Image; got != in.SidecarImage {
		t.Errorf("injected sidecar image %q, want the one the install set (%s: %s)", got, imageSetBy, in.SidecarImage)
	}

	wrote := checkSucceededAndStored(t, in, ns, name, jobID, pod, 180*time.Second)

	// The Go client through the installed control plane.
	readURL, ca := readEndpoint(t)
	oc, err := client.New(orchestratorConfig(t, ns, "orchestrator"), client.Options{ReadURL: readURL, ReadCA: ca,
		ReadServerName: localcluster.ControlPlaneService + "." + localcluster.ControlPlaneNamespace + ".svc"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := oc.Get(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	arts, err := oc.Artifacts(ctx, got)
	if err != nil {
		t.Fatalf("listing the artifacts through %s: %v", readURL, err)
	}
	if len(arts) != len(wrote) {
		t.Errorf("the client lists %d artifacts, the trainer wrote %d: %+v", len(arts), len(wrote), arts)
	}
	for _, a := range arts {
		var body bytes.Buffer
		if _, err := oc.Download(ctx, got, a.Path, &body); err != nil {
			t.Errorf("downloading %s through %s: %v", a.Path, readURL, err)
			continue
		}
		sum := md5.Sum(body.Bytes())
		if !a.Verified || hex.EncodeToString(sum[:]) != wrote[a.Path] {
			t.Errorf("%s: downloaded MD5 %x (verified %v), the trainer wrote %s", a.Path, sum, a.Verified, wrote[a.Path])
		}
	}
	logf("%s: %d files verified in the store's volume and downloaded through %s", ns, len(arts), readURL)
}

// checkSucceededAndStored waits (up to timeout) for binding ns/name
// Succeeded with a verified manifest, then checks it against what the
// trainer of pod (its first) wrote, from the trainer's own closing list
// read through the kubelet: the worker registered is pod, the trainer
// exited 0, and every file is in the installed store's volume with the
// trainer's MD5 (read from the volume, not through Tether), nothing else
// is, and the manifest counts them. It returns the trainer's files
// (path → MD5).
func checkSucceededAndStored(t *testing.T, in *localcluster.Installed, ns, name, jobID string, pod *corev1.Pod, timeout time.Duration) map[string]string {
	t.Helper()
	ctx := context.Background()
	wb := waitBinding(t, ns, name, timeout, "Succeeded with a verified manifest", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != tetherv1.PhaseSucceeded {
			return fmt.Errorf("phase %s/%s: %s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
		}
		if a := wb.Status.Artifacts; a == nil || !a.ManifestVerified {
			return fmt.Errorf("succeeded, manifest not verified: %+v", wb.Status.Artifacts)
		}
		return nil
	})
	if wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(pod.UID) {
		t.Errorf("registered worker %+v, want pod %s (registered through %s)", wb.Status.Worker, pod.UID, localcluster.ControlPlaneBindingURL)
	}
	if code := ptr.Deref(wb.Status.TrainerExitCode, -1); code != 0 {
		t.Errorf("trainer exit code %d, want 0", code)
	}

	// What the trainer wrote (its closing list: path, MD5, size), from its
	// log through the kubelet.
	pod = waitPod(t, ns, pod.Name, 60*time.Second, "the trainer pod Succeeded", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	raw, err := cluster.Clientset.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "node"}).Do(ctx).Raw()
	if err != nil {
		t.Fatal(err)
	}
	wrote := standinFiles(string(raw))
	if _, ok := wrote["model/final.safetensors"]; !ok || len(wrote) < 5 {
		t.Fatalf("the trainer's file list %v: want the final model and at least 4 more\n%s", wrote, raw)
	}

	// The store's own bytes: versitygw's posix backend keeps each object
	// as a file under the bucket's directory on the PersistentVolume.
	onDisk := storeFiles(t, filepath.Join(in.StoreDir, localcluster.StoreBucket, jobID))
	for rel, sum := range wrote {
		if onDisk[rel] != sum {
			t.Errorf("%s: the trainer wrote MD5 %s, the installed store holds %q", rel, sum, onDisk[rel])
		}
	}
	for rel := range onDisk {
		if _, ok := wrote[rel]; !ok {
			t.Errorf("the store holds %s, which the trainer did not write", rel)
		}
	}
	if int(wb.Status.Artifacts.Files) != len(wrote) {
		t.Errorf("the manifest lists %d files, the trainer wrote %d", wb.Status.Artifacts.Files, len(wrote))
	}

	return wrote
}

// createBoundJob creates namespace ns with the real-node queue and, in it, a
// labeled TrainJob name on Trainer's torch-distributed runtime as shipped
// (one node, the trainer stand-in running plan), and returns the job id the
// installed webhook stamped on it.
func createBoundJob(t *testing.T, ns, name string, plan localcluster.TrainerPlan, with ...func(*testobj.TrainJobWrapper)) string {
	t.Helper()
	ctx := context.Background()
	c := cluster
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := c.RealNodeQueue(ctx, ns, "real-node-queue"); err != nil {
		t.Fatal(err)
	}
	w := testobj.MakeTrainJob(name, ns).Runtime(localcluster.TorchRuntime).Bound().
		ResourcesPerNode(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}).
		Image(c.RealNodes()[0].Image("tether-trainer-standin")).Command("/trainer-standin").
		Args(plan.Args(jobconfig.DefaultArtifactPath)...).Queue("real-node-queue")
	for _, f := range with {
		f(w)
	}
	tj := w.Obj()
	if err := c.Client.Create(ctx, tj); err != nil {
		t.Fatalf("creating the labeled TrainJob: %v", err)
	}
	jobID := tj.Annotations[names.JobIDAnnotation]
	if jobID == "" {
		t.Fatalf("the installed webhook admitted the labeled TrainJob without %s: %v", names.JobIDAnnotation, tj.Annotations)
	}
	return jobID
}

// readEndpoint is a ready replica's binding port by pod IP (the host
// routes into the nodes' pod CIDRs; it has no cluster DNS or kube-proxy)
// and the CA of the certificate the control plane issued itself
// (certMode self-managed, Secret tether-control-plane-cert).
func readEndpoint(t *testing.T) (string, []byte) {
	t.Helper()
	ctx := context.Background()
	ips, err := cluster.Installed.ReadyEndpoints(ctx)
	if err != nil || len(ips) == 0 {
		t.Fatalf("no ready endpoint of the control plane's Service (%v)", err)
	}
	var sec corev1.Secret
	if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: "tether-control-plane-cert"}, &sec); err != nil {
		t.Fatal(err)
	}
	if len(sec.Data["ca.crt"]) == 0 {
		t.Fatalf("Secret tether-control-plane-cert has no ca.crt (keys %v)", keysOf(sec.Data))
	}
	return "https://" + net.JoinHostPort(ips[0], "8443"), sec.Data["ca.crt"]
}

func keysOf(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// orchestratorConfig is a ServiceAccount of ns with what an orchestrator
// needs on WorkerBindings there and nothing else: its token, no client
// certificate.
func orchestratorConfig(t *testing.T, ns, name string) *rest.Config {
	t.Helper()
	objs := []crclient.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"tether.dev"}, Resources: []string{"workerbindings"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
	}
	return &rest.Config{Host: cluster.Config.Host, BearerToken: createAndToken(t, ns, name, objs...), TLSClientConfig: rest.TLSClientConfig{CAData: cluster.Config.CAData}}
}

// createAndToken creates objs (ServiceAccount ns/name among them, and what
// it is granted) and returns a token of that ServiceAccount for an hour.
func createAndToken(t *testing.T, ns, name string, objs ...crclient.Object) string {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		if err := cluster.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := cluster.Clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// storeFiles are the MD5s of the job's objects as files in the store's
// bucket directory, by path relative to the job's prefix; Tether's own
// keys (node manifests, everything under .tether/) are left out.
func storeFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return out // nothing stored for the job yet
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if _, ok := upload.ManifestRank(rel, binding.MaxBoundNodes); ok || strings.HasPrefix(rel, upload.ReservedDir+"/") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := md5.Sum(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatalf("reading the installed store's bucket directory %s: %v", dir, err)
	}
	return out
}

// standinFiles parses the stand-in's closing list ("trainer-standin: file
// <path> <md5> <size>"): path → MD5.
func standinFiles(log string) map[string]string {
	files := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 5 && f[0] == "trainer-standin:" && f[1] == "file" {
			files[f[2]] = f[3]
		}
	}
	return files
}

// running says whether the named containers (init containers included)
// all run.
func running(p *corev1.Pod, names ...string) error {
	state := map[string]corev1.ContainerState{}
	for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		state[s.Name] = s.State
	}
	for _, n := range names {
		if state[n].Running == nil {
			return fmt.Errorf("container %s not running: %+v", n, state[n])
		}
	}
	return nil
}

// waitPod waits for the first trainer pod of TrainJob job (or the pod
// named job, once known) to satisfy ok.
func waitPod(t *testing.T, ns, job string, timeout time.Duration, what string, ok func(*corev1.Pod) error) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	eventually(t, timeout, what, func() error {
		var pods corev1.PodList
		if err := cluster.Client.List(context.Background(), &pods, crclient.InNamespace(ns)); err != nil {
			return err
		}
		var errs []string
		for i, p := range pods.Items {
			if p.Name != job && p.Labels[trainjob.JobSetNameLabel] != job {
				continue
			}
			if err := ok(&pods.Items[i]); err != nil {
				errs = append(errs, p.Name+": "+err.Error())
				continue
			}
			found = &pods.Items[i]
			return nil
		}
		return fmt.Errorf("no pod yet (%s)", strings.Join(errs, "; "))
	})
	logf("%s/%s: %s", ns, found.Name, what)
	return found
}

func waitBinding(t *testing.T, ns, name string, timeout time.Duration, what string, ok func(*tetherv1.WorkerBinding) error) *tetherv1.WorkerBinding {
	t.Helper()
	var wb *tetherv1.WorkerBinding
	eventually(t, timeout, what, func() error {
		wb = &tetherv1.WorkerBinding{}
		if err := cluster.Client.Get(context.Background(), crclient.ObjectKey{Namespace: ns, Name: name}, wb); err != nil {
			return err
		}
		return ok(wb)
	})
	logf("%s/%s: %s", ns, name, what)
	return wb
}

// eventually retries check every 200ms until it returns nil or timeout;
// on timeout it fails t with the installed control plane's state.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v\n%s", what, timeout, err, cluster.Installed.Diagnose(context.Background()))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
