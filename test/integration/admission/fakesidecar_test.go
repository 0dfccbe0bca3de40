package admission

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// fakeSidecarPod is a bound job's trainer pod whose template (a tenant's
// namespaced TrainingRuntime) already carries an init container named like
// Tether's, another image running `sleep infinity`, the ids and URLs the
// real one has, and a matching tether.dev/status annotation: everything a
// user can write, and no token volume.
func fakeSidecarPod(trainJob, ns, jobID, workerID string) *testobj.PodWrapper {
	return testobj.MakeTrainerPod(trainJob, ns).
		Annotation(names.PodStatusAnnotation, trainjob.InjectionStatus{Version: trainjob.InjectionStatusVersion, JobID: jobID, WorkerID: workerID,
			Sidecar: trainjob.SidecarContainer, ArtifactVolume: mutate.ArtifactVolumeName}.String()).
		InitContainer(corev1.Container{Name: trainjob.SidecarContainer, Image: "busybox:1.37", Command: []string{"sleep", "infinity"},
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Env: []corev1.EnvVar{{Name: names.EnvJobID, Value: jobID}, {Name: names.EnvWorkerID, Value: workerID},
				{Name: names.EnvServerURL, Value: "https://tether-control-plane.tether-system.svc:8443"},
				{Name: names.EnvTokenFile, Value: mutate.SidecarTokenDir + "/" + names.TokenKey}}})
}

// TestTenantCannotPassAFakeSidecarAsInjected: a tenant's pod that merely
// looks injected is not admitted as injected (the pod webhook refuses it,
// with a Warning Event naming what is wrong), and one that never went
// through the webhook (not routed) is not counted as injected by the
// controller.
func TestTenantCannotPassAFakeSidecarAsInjected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tenant, err := env.NewTenant(ctx, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, routed := range []bool{true, false} {
		name := map[bool]string{true: "fake-routed", false: "fake-unrouted"}[routed]
		t.Run(name, func(t *testing.T) {
			tj := testobj.MakeTrainJob(name, ns).Bound().Obj()
			if err := tenant.Client.Create(ctx, tj); err != nil {
				t.Fatal(err)
			}
			w := fakeSidecarPod(name, ns, tj.Annotations[names.JobIDAnnotation], tj.Annotations[names.WorkerIDAnnotation])
			if routed {
				w = w.Routed()
			}
			pod := w.Obj()
			err := tenant.Client.Create(ctx, pod)
			switch {
			case routed && err == nil:
				t.Fatalf("the fake sidecar was admitted (volumes %v, init containers %v): want it refused", volumeNames(pod), initImages(pod))
			case routed && !apierrors.IsForbidden(err):
				t.Fatalf("create: %v, want a denial", err)
			case routed:
				t.Logf("refused: %v", err)
				if !strings.Contains(err.Error(), "not this job's injection") {
					t.Errorf("denial %q does not say the pod is not Tether's injection", err)
				}
				waitForEventNote(t, ns, name, string(mutate.DenyStaleInjection), "command")
			case err != nil:
				t.Fatalf("create unrouted pod: %v", err)
			}
			eventually(t, func() error {
				wb, err := get(t, &tetherv1.WorkerBinding{}, ns, name)
				if err != nil {
					return err
				}
				c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionPodsInjected)
				switch {
				case c == nil:
					return fmt.Errorf("no %s condition yet", tetherv1.ConditionPodsInjected)
				case c.Status == metav1.ConditionTrue:
					t.Fatalf("PodsInjected=True for a fake sidecar: %s", c.Message)
				case !routed && c.Status != metav1.ConditionFalse:
					return fmt.Errorf("PodsInjected=%s (%s), want False naming %s", c.Status, c.Message, pod.Name)
				}
				return nil
			})
		})
	}
}

func volumeNames(p *corev1.Pod) []string {
	var out []string
	for _, v := range p.Spec.Volumes {
		out = append(out, v.Name)
	}
	return out
}

func initImages(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.InitContainers {
		out = append(out, c.Name+"="+c.Image)
	}
	return out
}

// TestInjectedPodAsStoredIsProven: Tether's own injection, as the API server
// stores it (every default applied), submitted again (what a reinvocation or
// a pod made from the injected spec sends), is proven injected and admitted
// unchanged, not refused as a look-alike.
func TestInjectedPodAsStoredIsProven(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("again", ns).Bound().Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	first := testobj.MakeTrainerPod("again", ns).Routed().Obj()
	if err := env.Client.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	stored := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(first), stored); err != nil {
		t.Fatal(err)
	}
	copyOf := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: stored.GenerateName,
		Labels: stored.Labels, Annotations: stored.Annotations}, Spec: *stored.Spec.DeepCopy()}
	copyOf.Spec.NodeName = ""
	if err := env.Client.Create(ctx, copyOf, client.DryRunAll); err != nil {
		t.Fatalf("Tether's own injection, as stored, submitted again: %v", err)
	}
	if n := len(copyOf.Spec.InitContainers); n != len(stored.Spec.InitContainers) {
		t.Errorf("re-injected: %d init containers, want the %d it had", n, len(stored.Spec.InitContainers))
	}
	if got, want := copyOf.Annotations[names.PodStatusAnnotation], stored.Annotations[names.PodStatusAnnotation]; got != want {
		t.Errorf("status annotation changed from %s to %s", want, got)
	}
}
