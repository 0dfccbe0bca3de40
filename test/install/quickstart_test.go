package install

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// TestUninstallThenQuickStart: the helm release is uninstalled while a bound
// job trains (its trainer trains on, and no finalizer of Tether's holds its
// objects), and nothing of Tether's is left to stand in a workload's way: no webhook
// configuration, no control-plane Deployment or cluster RBAC, and a pod in
// a namespace of its own is admitted and runs; the store's claim, holding
// every job's artifacts, is kept. Then the quick start is
// installed as its README says, `kubectl apply -k` over
// manifests/overlays/quick-start, with every image (the sidecar's too) set
// through kustomize's images: under a team's registry, its store on the
// claim the helm release kept; the same job as TestInstallHelm
// goes to Succeeded through it, and the job that ran through the uninstall
// gets a final phase that is true of what the store holds.
func TestUninstallThenQuickStart(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestUninstallThenQuickStart: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	helm := cluster.Installed
	// A bound job trains through the uninstall.
	running := startRunningJob(t, "through-uninstall")
	if err := helm.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
	running.checkUnblocked(t)
	for _, o := range []crclient.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "tether-webhook"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "tether-control-plane"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: localcluster.ControlPlaneService, Namespace: localcluster.ControlPlaneNamespace}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: localcluster.StoreService, Namespace: localcluster.ControlPlaneNamespace}},
	} {
		if err := cluster.Client.Get(ctx, crclient.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("after helm uninstall, %T %s: %v (want NotFound)", o, o.GetName(), err)
		}
	}
	// The store's claim is kept (helm.sh/resource-policy: keep), and with it
	// every job's artifacts.
	pvc := &corev1.PersistentVolumeClaim{}
	if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: localcluster.StoreService}, pvc); err != nil {
		t.Errorf("after helm uninstall, the store's claim: %v (want it kept)", err)
	} else if pvc.Status.Phase != corev1.ClaimBound {
		t.Errorf("after helm uninstall, the store's claim is %s, want Bound", pvc.Status.Phase)
	}
	// A workload that never opted in runs as before.
	ns := "after-uninstall"
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	node := cluster.RealNodes()[0]
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, Spec: corev1.PodSpec{
		NodeName: node.Name, RestartPolicy: corev1.RestartPolicyNever,
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Volumes:     []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Containers: []corev1.Container{{Name: "work", Image: node.Image("tether-trainer-standin"), Command: []string{"/trainer-standin"},
			Args:         localcluster.TrainerPlan{Steps: 1, StepInterval: 100 * time.Millisecond}.Args("/out"),
			VolumeMounts: []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}}},
	}}
	if err := cluster.Client.Create(ctx, p); err != nil {
		t.Fatalf("a plain pod after the uninstall: %v", err)
	}
	waitPod(t, ns, "plain", 90*time.Second, "a plain pod ran to completion with Tether uninstalled", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})

	q, err := helm.InstallQuickStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logf("quick start applied in %.1fs, both replicas Ready and the webhooks served %.1fs after", q.HelmInstall.Seconds(), (q.Ready - q.HelmInstall).Seconds())
	runInstalledJob(t, q, "quick-start", "kustomize images: for ghcr.io/tether-dev/tether-sidecar")
	running.checkEndReported(t, q)
}

// runningJob is a bound job started before an uninstall.
type runningJob struct {
	ns, name, jobID string
	pod             *corev1.Pod
}

const runningJobName = "long-finetune"

// startRunningJob starts a bound 45-step job (checkpoints every 5) in a
// new namespace ns and waits for its binding Running.
func startRunningJob(t *testing.T, ns string) *runningJob {
	t.Helper()
	return startRunningJobWith(t, ns, localcluster.TrainerPlan{Steps: 45, CheckpointEvery: 5, StepInterval: time.Second})
}

// startRunningJobWith is startRunningJob with the trainer running plan.
func startRunningJobWith(t *testing.T, ns string, plan localcluster.TrainerPlan) *runningJob {
	t.Helper()
	jobID := createBoundJob(t, ns, runningJobName, plan)
	j := &runningJob{ns: ns, name: runningJobName, jobID: jobID}
	j.pod = waitPod(t, ns, runningJobName, 120*time.Second, "the long job's trainer running", func(p *corev1.Pod) error {
		return running(p, mutate.SidecarName, "node")
	})
	waitBinding(t, ns, runningJobName, 60*time.Second, "the long job's binding Running", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != tetherv1.PhaseRunning {
			return fmt.Errorf("phase %s/%s", wb.Status.Phase, wb.Status.Reason)
		}
		return nil
	})
	return j
}

// checkUnblocked: with Tether uninstalled the job's pod trains on, and
// nothing of Tether's holds its TrainJob, binding or token Secret (a
// finalizer with no controller behind it would block deleting them, and
// their namespace).
func (j *runningJob) checkUnblocked(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	time.Sleep(3 * time.Second)
	p := &corev1.Pod{}
	if err := cluster.Client.Get(ctx, crclient.ObjectKeyFromObject(j.pod), p); err != nil {
		t.Fatal(err)
	}
	if err := running(p, "node"); err != nil {
		t.Errorf("after helm uninstall the bound job's trainer stopped: %v", err)
	}
	tj := &trainer.TrainJob{}
	wb := &tetherv1.WorkerBinding{}
	secret := &corev1.Secret{}
	for _, o := range []crclient.Object{tj, wb, secret} {
		name := j.name
		if o == secret {
			name = binding.TokenSecretName(j.name)
		}
		if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: j.ns, Name: name}, o); err != nil {
			t.Fatal(err)
		}
		for _, f := range o.GetFinalizers() {
			if strings.Contains(f, "tether") {
				t.Errorf("after helm uninstall %T %s holds finalizer %s, which nothing removes now", o, name, f)
			}
		}
	}
}

// checkEndReported: once Tether is back (the quick start), the job that
// ran through the uninstall gets a final phase, and it is true: Succeeded
// only with every file the trainer wrote in the store with the trainer's
// MD5; otherwise Failed with a reason; either way no file in the store
// differs from what the trainer wrote.
func (j *runningJob) checkEndReported(t *testing.T, in *localcluster.Installed) {
	t.Helper()
	ctx := context.Background()
	wb := waitBinding(t, j.ns, j.name, 240*time.Second, "the job that ran through the uninstall ended", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != tetherv1.PhaseSucceeded && wb.Status.Phase != tetherv1.PhaseFailed {
			return fmt.Errorf("phase %s/%s: %s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
		}
		return nil
	})
	raw, err := cluster.Clientset.CoreV1().Pods(j.ns).GetLogs(j.pod.Name, &corev1.PodLogOptions{Container: "node"}).Do(ctx).Raw()
	if err != nil {
		t.Fatal(err)
	}
	wrote := standinFiles(string(raw))
	onDisk := storeFiles(t, filepath.Join(in.StoreDir, localcluster.StoreBucket, j.jobID))
	for rel, sum := range onDisk {
		if wrote[rel] != sum {
			t.Errorf("%s: the store holds MD5 %s, the trainer wrote %q", rel, sum, wrote[rel])
		}
	}
	switch wb.Status.Phase {
	case tetherv1.PhaseSucceeded:
		if len(onDisk) != len(wrote) || wb.Status.Artifacts == nil || !wb.Status.Artifacts.ManifestVerified {
			t.Errorf("Succeeded with %d of the trainer's %d files in the store (artifacts %+v)", len(onDisk), len(wrote), wb.Status.Artifacts)
		}
	default:
		if wb.Status.Reason == "" || wb.Status.Message == "" {
			t.Errorf("Failed without a reason or message: %+v", wb.Status)
		}
	}
	logf("the job that ran through the uninstall ended %s/%s (%s); %d of the trainer's %d files in the store", wb.Status.Phase, wb.Status.Reason, wb.Status.Message, len(onDisk), len(wrote))
}
