package install

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/internal/localcluster"
)

// TestUninstallThenQuickStart: the helm release is uninstalled, and nothing
// of Tether's is left to stand in a workload's way: no webhook
// configuration, no control-plane Deployment or cluster RBAC, and a pod in
// a namespace of its own is admitted and runs; the store's claim, holding
// every job's artifacts, is kept. Then the quick start is
// installed as its README says, `kubectl apply -k` over
// manifests/overlays/quick-start, with every image (the sidecar's too) set
// through kustomize's images: under a team's registry, its store on the
// claim the helm release kept; the same job as TestInstallHelm
// goes to Succeeded through it.
func TestUninstallThenQuickStart(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestUninstallThenQuickStart: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	helm := cluster.Installed
	if err := helm.Uninstall(ctx); err != nil {
		t.Fatal(err)
	}
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
			return errPhase(p)
		}
		return nil
	})

	q, err := helm.InstallQuickStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logf("quick start applied in %.1fs, both replicas Ready and the webhooks served %.1fs after", q.HelmInstall.Seconds(), (q.Ready - q.HelmInstall).Seconds())
	runInstalledJob(t, q, "quick-start", "kustomize images: for ghcr.io/tether-dev/tether-sidecar")
}
