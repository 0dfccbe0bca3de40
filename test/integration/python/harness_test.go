package python

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/sidecar/session"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// startWithReadAPI runs an API server that proxies aggregated APIs and a
// control plane (fs artifact store) serving the read API as its
// ServiceAccount, with the shipped APIService registered and Available.
func startWithReadAPI(t *testing.T) *testenv.Env {
	t.Helper()
	ctx := context.Background()
	opts := testenv.Options{FrontProxy: true, NoControlPlane: true}
	env := testenv.StartForTest(t, opts)
	for _, o := range testenv.ManifestObjects(t, "overlays/read-api/rbac.yaml") {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	cfg, err := env.ServiceAccountConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts.ControlPlane = func(o *controlplane.Options) { o.ReadAPI = true }
	if err := env.StartControlPlane(ctx, cfg, opts); err != nil {
		t.Fatal(err)
	}
	env.RegisterReadAPI(t)
	return env
}

// kubeconfigFor creates ServiceAccount name in ns holding only a Role of
// rules there (and, if given, ClusterRole clusterRole bound in ns), and
// writes a kubeconfig with its token, nothing else.
func kubeconfigFor(t *testing.T, env *testenv.Env, ns, name string, rules []rbacv1.PolicyRule, clusterRole string) string {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}},
	}
	if clusterRole != "" {
		objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + clusterRole},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}})
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: name, Namespace: ns}
	kc.CurrentContext = name
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// job is a bound TrainJob with its injected node-0 pod, its sidecar's
// session client running, and what the kubelet would mount into it.
type job struct {
	env                       *testenv.Env
	ns, name, jobID           string
	pod                       *corev1.Pod
	tokenFile, caFile         string
	podTokenFile, artifactDir string
}

// newRunningJob creates TrainJob name in ns (which exists), its trainer
// pod, and runs its sidecar's session client (acknowledging every command)
// until the test ends; it returns once the binding is Running.
func newRunningJob(t *testing.T, env *testenv.Env, ns, name string) *job {
	t.Helper()
	ctx := context.Background()
	j := &job{env: env, ns: ns, name: name}
	if err := env.Client.Create(ctx, testobj.MakeTrainJob(name, ns).Bound().Annotation(names.HeartbeatIntervalAnnotation, "1s").Obj()); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	testenv.Eventually(t, 15*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName(name)}, secret)
	})
	j.waitPhase(t, tetherv1.PhasePending)
	j.pod = testobj.MakeTrainerPod(name, ns).Routed().Obj()
	if err := env.Client.Create(ctx, j.pod); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	j.tokenFile, j.caFile, j.podTokenFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "pod-token")
	j.artifactDir = filepath.Join(dir, "artifacts")
	for path, data := range map[string][]byte{j.tokenFile: secret.Data["token"], j.caFile: secret.Data["ca.crt"]} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(j.artifactDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.WritePodToken(ctx, cs, j.pod, j.podTokenFile); err != nil {
		t.Fatal(err)
	}
	e := testenv.SidecarEnv(j.pod)
	j.jobID = e[names.EnvJobID]
	c, err := session.NewClient(session.Config{
		ServerURL: e[names.EnvServerURL], TokenFile: j.tokenFile, PodTokenFile: j.podTokenFile, CAFile: j.caFile,
		JobID: e[names.EnvJobID], WorkerID: e[names.EnvWorkerID],
		Pod:               binding.PodIdentity{Namespace: e[names.EnvPodNamespace], Name: e[names.EnvPodName], UID: e[names.EnvPodUID]},
		HeartbeatInterval: time.Second, BackoffInitial: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		// Every command is run and acknowledged (without OnCommand a sidecar refuses them).
		OnCommand: func(context.Context, binding.Command) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	go func() { _ = c.Run(runCtx) }()
	t.Cleanup(stop)
	j.waitPhase(t, tetherv1.PhaseRunning)
	return j
}

// upload writes files into the artifact directory and runs the sidecar's
// flush: the files, then the manifest.
func (j *job) upload(t *testing.T, files map[string][]byte) {
	t.Helper()
	for rel, data := range files {
		p := filepath.Join(j.artifactDir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := testenv.SidecarEnv(j.pod)
	up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: e[names.EnvServerURL], JobID: j.jobID, TokenFile: j.tokenFile,
		PodTokenFile: j.podTokenFile, CAFile: j.caFile})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := artifacts.NewScanner(artifacts.ScannerConfig{Dir: j.artifactDir, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.NewSyncer(artifacts.SyncerConfig{Scanner: sc, Uploader: up, JobID: j.jobID, PodUID: e[names.EnvPodUID]})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v (%+v)", err, rep)
	}
}

// succeed ends the trainer with exit 0 and completes the TrainJob, as the
// kubelet and Trainer would (neither runs here).
func (j *job) succeed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	j.pod.Status.Phase = corev1.PodRunning
	j.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.Now()}}}}
	if err := j.env.Client.Status().Update(ctx, j.pod); err != nil {
		t.Fatal(err)
	}
	tj := &trainer.TrainJob{}
	if err := j.env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: j.name}, tj); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{Type: "Complete", Status: metav1.ConditionTrue, Reason: "Complete", Message: "jobset completed"})
	if err := j.env.Client.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	j.waitPhase(t, tetherv1.PhaseSucceeded)
}

// removePodOnceSuspended deletes the trainer pod once the TrainJob is
// suspended, as Trainer and JobSet would, until the test ends.
func (j *job) removePodOnceSuspended(t *testing.T) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() {
		for ctx.Err() == nil {
			tj := &trainer.TrainJob{}
			if err := j.env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: j.name}, tj); err == nil &&
				tj.Spec.Suspend != nil && *tj.Spec.Suspend {
				_ = j.env.Client.Delete(ctx, j.pod, client.GracePeriodSeconds(0))
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

func (j *job) waitPhase(t *testing.T, phase tetherv1.WorkerBindingPhase) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		wb := &tetherv1.WorkerBinding{}
		if err := j.env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, wb); err != nil {
			return err
		}
		if wb.Status.Phase != phase {
			return fmt.Errorf("phase %s/%s (%s), want %s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message, phase)
		}
		return nil
	})
}
