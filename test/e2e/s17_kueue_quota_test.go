package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// kueueGroup is Kueue v0.17's API, read unstructured (Tether does not import Kueue).
var kueueGroup = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// Scenario 17: Kueue mode. The runtime declares Tether's sidecar with its
// resources, so Kueue counts trainer + sidecar. In a ClusterQueue whose quota
// is exactly that, a bound job is admitted (the Workload's pod set and its
// admission's resource usage include the sidecar), its pod runs the declared
// sidecar completed by Tether with exactly the declared resources, and the
// job succeeds. In a ClusterQueue that fits the trainer alone, the same job
// stays pending (QuotaReserved false, insufficient quota) instead of
// overcommitting, while a job on the runtime without the declaration is
// admitted there: Kueue does not count the sidecar Tether adds at Pod level.
// An unlabeled job on the declaring runtime never reaches Tether and keeps
// the placeholder.
func TestScenario17KueueQuota(t *testing.T) {
	timed(t)
	ctx := context.Background()
	ns := suite.newNamespace(t, "kueue-quota")

	// The quotas come from the runtime's own declaration.
	rt := &trainer.ClusterTrainingRuntime{}
	if err := suite.c.Client.Get(ctx, types.NamespacedName{Name: localcluster.RuntimeDeclaredSidecar}, rt); err != nil {
		t.Fatal(err)
	}
	podSpec := rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	declared := podSpec.InitContainers[0]
	if declared.Name != trainjob.SidecarContainer {
		t.Fatalf("runtime %s's first init container is %q, want the declared %s", rt.Name, declared.Name, trainjob.SidecarContainer)
	}
	trainerReq, sidecarReq := podSpec.Containers[0].Resources.Requests, declared.Resources.Requests
	both := sumResources(trainerReq, sidecarReq)
	// Fits the trainer and Tether's Pod-level sidecar (50m, 64Mi), not the declared one.
	short := sumResources(trainerReq, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")})
	exactCQ, shortCQ := ns+"-exact", ns+"-short"
	suite.clusterQueue(t, exactCQ, both)
	suite.clusterQueue(t, shortCQ, short)
	suite.localQueue(t, ns, "exact", exactCQ)
	suite.localQueue(t, ns, "short", shortCQ)
	logf("scenario 17: trainer %s + declared sidecar %s; ClusterQueue %s quota %s, %s quota %s",
		listString(trainerReq), listString(sidecarReq), exactCQ, listString(both), shortCQ, listString(short))

	// 1. Declared sidecar, quota exactly trainer + sidecar: admitted.
	const fits = "declared-fits"
	setPlans(ns, fits, localcluster.TrainerPlan{Steps: 4, CheckpointEvery: 2, StepInterval: 300 * time.Millisecond})
	tj := bound(trainJob(fits, ns)).Queue("exact").Obj()
	tj.Spec.RuntimeRef.Name = localcluster.RuntimeDeclaredSidecar
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	wl := suite.waitQuotaReserved(t, ns, fits, 60*time.Second, "True")
	if got := podSetSidecar(t, wl); !equality.Semantic.DeepEqual(got, declared.Resources) {
		t.Errorf("the Workload's pod set declares the sidecar with %+v, want the runtime's %+v", got, declared.Resources)
	}
	if usage := admittedUsage(t, wl); !equalLists(usage, both) {
		t.Errorf("Kueue admitted %s/%s with usage %s, want trainer + sidecar %s", ns, fits, listString(usage), listString(both))
	} else {
		logf("scenario 17: Workload %s admitted with resourceUsage %s (trainer + sidecar, the whole quota of %s)", wl.GetName(), listString(usage), exactCQ)
	}
	pod := suite.injectedPod(t, ns, fits, "")
	var sidecars []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		if c.Name == trainjob.SidecarContainer {
			sidecars = append(sidecars, c)
		}
	}
	switch {
	case len(sidecars) != 1:
		t.Fatalf("pod %s has %d containers named %s, want the one declared, completed", pod.Name, len(sidecars), trainjob.SidecarContainer)
	case !equality.Semantic.DeepEqual(sidecars[0].Resources, declared.Resources):
		t.Errorf("the pod's sidecar runs with %+v, want the declared %+v (what Kueue counted)", sidecars[0].Resources, declared.Resources)
	case sidecars[0].Image == declared.Image:
		t.Errorf("the pod's sidecar still runs the placeholder image %s", declared.Image)
	}
	if st, err := trainjob.ParseInjectionStatus(pod.Annotations[names.PodStatusAnnotation]); err != nil || !st.Declared {
		t.Errorf("pod %s status %q (%v): want declared=true", pod.Name, pod.Annotations[names.PodStatusAnnotation], err)
	}
	logf("scenario 17: pod %s runs sidecar %s with requests %s, limits %s", pod.Name, sidecars[0].Image,
		listString(sidecars[0].Resources.Requests), listString(sidecars[0].Resources.Limits))
	suite.waitBinding(t, ns, fits, 60*time.Second, "registered", phaseIs(tetherv1.PhaseRunning, ""))
	suite.expectSucceededWithArtifacts(t, pod, fits, jobID)

	// 2. The same job where the trainer alone fits: pending, not overcommitted.
	const tooBig = "declared-too-big"
	tj = bound(trainJob(tooBig, ns)).Queue("short").Obj()
	tj.Spec.RuntimeRef.Name = localcluster.RuntimeDeclaredSidecar
	suite.create(t, tj)
	wl = suite.waitQuotaReserved(t, ns, tooBig, 60*time.Second, "False")
	msg := conditionMessage(wl, "QuotaReserved")
	if !strings.Contains(msg, "insufficient quota") {
		t.Errorf("Workload %s: QuotaReserved false with %q, want insufficient quota", wl.GetName(), msg)
	}
	logf("scenario 17: %s/%s pending: %s", ns, tooBig, msg)

	// 3. Contrast: the runtime without a declaration fits the same queue,
	// because Kueue never sees the sidecar Tether adds to the pod.
	const undeclared = "undeclared-fits"
	setPlans(ns, undeclared, localcluster.TrainerPlan{Steps: 2, CheckpointEvery: 1, StepInterval: 300 * time.Millisecond})
	suite.create(t, bound(trainJob(undeclared, ns)).Queue("short").Obj())
	wl = suite.waitQuotaReserved(t, ns, undeclared, 60*time.Second, "True")
	usage := admittedUsage(t, wl)
	if !equalLists(usage, trainerReq) {
		t.Errorf("the undeclared job was admitted with usage %s, want the trainer's alone %s", listString(usage), listString(trainerReq))
	}
	other := suite.injectedPod(t, ns, undeclared, "")
	podReq := sumResources(other.Spec.Containers[0].Resources.Requests, other.Spec.InitContainers[len(other.Spec.InitContainers)-1].Resources.Requests)
	logf("scenario 17: %s/%s (no declaration) admitted in %s with usage %s while its pod requests %s: the overcommit Kueue mode removes",
		ns, undeclared, shortCQ, listString(usage), listString(podReq))
	suite.waitBinding(t, ns, undeclared, 90*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))

	// The too-big job is still pending, with no pod: Kueue never admitted it.
	suite.waitQuotaReserved(t, ns, tooBig, 5*time.Second, "False")
	if !ptr.Deref(suite.getTrainJob(t, ns, tooBig).Spec.Suspend, false) {
		t.Errorf("%s is not suspended", tooBig)
	}
	if pods := suite.trainerPods(t, ns, tooBig); len(pods) != 0 {
		t.Errorf("%s has pods although Kueue did not admit it: %d", tooBig, len(pods))
	}
	if wb, err := suite.getBinding(ns, tooBig); err != nil || wb.Status.Phase != tetherv1.PhasePending {
		t.Errorf("binding of the pending job: %v, phase %v; want Pending", err, wb.Status.Phase)
	}

	// 4. An unlabeled job on the declaring runtime, in the exact queue (free
	// again since the first job finished): Kueue counts the placeholder;
	// Tether never sees the pod, which keeps it unchanged.
	const unbound = "unbound-declared"
	tj = trainJob(unbound, ns).Queue("exact").Obj()
	tj.Spec.RuntimeRef.Name = localcluster.RuntimeDeclaredSidecar
	podsBefore, _ := suite.metricValue(t, "tether_pod_admissions_total")
	suite.create(t, tj)
	wl = suite.waitQuotaReserved(t, ns, unbound, 60*time.Second, "True")
	if usage := admittedUsage(t, wl); !equalLists(usage, both) {
		t.Errorf("the unbound job was admitted with usage %s, want trainer + placeholder %s", listString(usage), listString(both))
	}
	var plain corev1.Pod
	eventually(t, 60*time.Second, "the unbound job's pod", func() error {
		pods := suite.trainerPods(t, ns, unbound)
		if len(pods) == 0 {
			return fmt.Errorf("no pod yet")
		}
		plain = pods[0]
		return nil
	})
	if len(plain.Spec.InitContainers) != 1 || plain.Spec.InitContainers[0].Image != declared.Image || plain.Annotations[names.PodStatusAnnotation] != "" {
		t.Errorf("the unbound job's pod was changed: init containers %+v, annotations %v", plain.Spec.InitContainers, plain.Annotations)
	}
	if n, _ := suite.metricValue(t, "tether_pod_admissions_total"); n != podsBefore {
		t.Errorf("tether_pod_admissions_total went %v -> %v: the unbound job's pod reached the pod webhook", podsBefore, n)
	}
	logf("scenario 17: unbound %s/%s admitted in %s with usage %s; its pod %s keeps init container %s with image %s",
		ns, unbound, exactCQ, listString(admittedUsage(t, wl)), plain.Name, plain.Spec.InitContainers[0].Name, plain.Spec.InitContainers[0].Image)
	for _, name := range []string{tooBig, unbound} {
		if err := suite.c.Client.Delete(ctx, suite.getTrainJob(t, ns, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// clusterQueue creates a ClusterQueue of default-flavor with quota, deleted
// when the test ends.
func (e *env) clusterQueue(t *testing.T, name string, quota corev1.ResourceList) {
	t.Helper()
	var resources []any
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q := quota[r]
		resources = append(resources, map[string]any{"name": string(r), "nominalQuota": q.String()})
	}
	cq := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "memory"},
			"flavors":          []any{map[string]any{"name": "default-flavor", "resources": resources}},
		}},
	}}}
	cq.SetGroupVersionKind(kueueGroup.WithKind("ClusterQueue"))
	cq.SetName(name)
	e.create(t, cq)
	t.Cleanup(func() { _ = e.c.Client.Delete(context.Background(), cq) })
}

func (e *env) localQueue(t *testing.T, ns, name, clusterQueue string) {
	t.Helper()
	lq := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"clusterQueue": clusterQueue}}}
	lq.SetGroupVersionKind(kueueGroup.WithKind("LocalQueue"))
	lq.SetNamespace(ns)
	lq.SetName(name)
	e.create(t, lq)
}

// waitQuotaReserved waits for the Workload of TrainJob name to have the
// condition QuotaReserved with status, and returns it.
func (e *env) waitQuotaReserved(t *testing.T, ns, name string, timeout time.Duration, status string) *unstructured.Unstructured {
	t.Helper()
	const cond = "QuotaReserved"
	var found *unstructured.Unstructured
	eventually(t, timeout, fmt.Sprintf("Workload of %s with %s=%s", name, cond, status), func() error {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(kueueGroup.WithKind("WorkloadList"))
		if err := e.c.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}
		for i := range list.Items {
			for _, o := range list.Items[i].GetOwnerReferences() {
				if o.Kind != "TrainJob" || o.Name != name {
					continue
				}
				if got := conditionStatus(&list.Items[i], cond); got != status {
					return fmt.Errorf("Workload %s: %s=%q (%s)", list.Items[i].GetName(), cond, got, conditionMessage(&list.Items[i], cond))
				}
				found = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no Workload owned by TrainJob %s yet", name)
	})
	return found
}

func condition(wl *unstructured.Unstructured, cond string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == cond {
			return m
		}
	}
	return nil
}

func conditionStatus(wl *unstructured.Unstructured, cond string) string {
	s, _ := condition(wl, cond)["status"].(string)
	return s
}

func conditionMessage(wl *unstructured.Unstructured, cond string) string {
	s, _ := condition(wl, cond)["message"].(string)
	return s
}

// podSetSidecar is the resources of the sidecar in the Workload's trainer pod set.
func podSetSidecar(t *testing.T, wl *unstructured.Unstructured) corev1.ResourceRequirements {
	t.Helper()
	var spec struct {
		PodSets []struct {
			Name     string                 `json:"name"`
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"podSets"`
	}
	fromUnstructured(t, wl.Object["spec"], &spec)
	for _, ps := range spec.PodSets {
		for _, c := range ps.Template.Spec.InitContainers {
			if c.Name == trainjob.SidecarContainer {
				return c.Resources
			}
		}
	}
	t.Fatalf("Workload %s has no pod set with init container %s", wl.GetName(), trainjob.SidecarContainer)
	return corev1.ResourceRequirements{}
}

// admittedUsage is the Workload's admitted resource usage, over its pod sets.
func admittedUsage(t *testing.T, wl *unstructured.Unstructured) corev1.ResourceList {
	t.Helper()
	var admission struct {
		PodSetAssignments []struct {
			ResourceUsage corev1.ResourceList `json:"resourceUsage"`
		} `json:"podSetAssignments"`
	}
	raw, ok, _ := unstructured.NestedMap(wl.Object, "status", "admission")
	if !ok {
		t.Fatalf("Workload %s has no status.admission", wl.GetName())
	}
	fromUnstructured(t, raw, &admission)
	var lists []corev1.ResourceList
	for _, a := range admission.PodSetAssignments {
		lists = append(lists, a.ResourceUsage)
	}
	return sumResources(lists...)
}

func fromUnstructured(t *testing.T, from any, into any) {
	t.Helper()
	m, ok := from.(map[string]any)
	if !ok {
		t.Fatalf("not an object: %T", from)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, into); err != nil {
		t.Fatal(err)
	}
}

func sumResources(lists ...corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, l := range lists {
		for name, q := range l {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	return out
}

// equalLists compares cpu and memory, the resources the queues cover.
func equalLists(a, b corev1.ResourceList) bool {
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		qa, qb := a[r], b[r]
		if qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

func listString(l corev1.ResourceList) string {
	cpu, mem := l[corev1.ResourceCPU], l[corev1.ResourceMemory]
	return fmt.Sprintf("cpu=%s,memory=%s", cpu.String(), mem.String())
}
