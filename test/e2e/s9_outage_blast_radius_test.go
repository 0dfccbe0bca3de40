package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// outageFor, outageBoundJobs and outageUnboundJobs are scenario 9's outage:
// every Tether replica down for 60 s while 5 bound and 5 unbound TrainJobs
// are created.
const (
	outageFor         = 60 * time.Second
	outageBoundJobs   = 5
	outageUnboundJobs = 5
)

// Scenario 9: every Tether replica down for 60s. Unbound TrainJobs are created,
// admitted by Kueue and their pods created and Running as if Tether were not
// installed (none of their objects reaches a Tether webhook); bound
// TrainJobs submitted meanwhile are refused by their webhook (so nothing of
// them runs unbound) and created once Tether is back by an orchestrator
// that retries; a bound job's pods are not created until Tether is back (pods.tether.dev fails closed for
// the pods that carry tether.dev/bind, and the Job controller retries), then
// the pod is injected and the job succeeds with its artifacts.
//
// The bound job's first pod creations are held back with a ResourceQuota
// (pods: 0) while Tether is still up, so that pod creation happens during
// the outage. That also shows a pod refused after Tether's webhook (quota) is
// not announced as injected.
func TestScenario9OutageBlastRadius(t *testing.T) {
	timed(t)
	ctx := context.Background()
	ns := suite.newNamespace(t, "outage")
	nsUnbound := suite.newNamespace(t, "outage-unbound")
	// The unbound jobs on a queue of their own, so all five are admitted at
	// once (cluster-queue serves the bound ones).
	if err := suite.c.BulkQueue(ctx, nsUnbound, "bulk"); err != nil {
		t.Fatal(err)
	}
	const name = "bound-during-outage"
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 4, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond})

	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hold-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	suite.create(t, quota)
	// Quota admission enforces it once the quota controller has written its status.
	eventually(t, 30*time.Second, "the ResourceQuota's status", func() error {
		q := &corev1.ResourceQuota{}
		if err := suite.c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: quota.Name}, q); err != nil {
			return err
		}
		if _, ok := q.Status.Hard[corev1.ResourcePods]; !ok {
			return fmt.Errorf("no status.hard yet")
		}
		return nil
	})
	patchedBefore, _ := suite.metricValue(t, "tether_pod_admissions_total", `outcome="patched"`)
	injectedBefore, _ := suite.metricValue(t, "tether_pods_injected_total")

	tj := bound(trainJob(name, ns)).Queue("user-queue").Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	jobName := name + "-node-0"

	// The label travels TrainJob -> JobSet -> trainer pod template (Trainer v2.3: runtimePatches).
	eventually(t, 60*time.Second, "the bound job's JobSet and Job carry tether.dev/bind", func() error {
		js := &unstructured.Unstructured{}
		js.SetGroupVersionKind(schema.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"})
		if err := suite.c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, js); err != nil {
			return err
		}
		if js.GetLabels()[names.BindLabel] != "true" {
			return fmt.Errorf("JobSet labels %v", js.GetLabels())
		}
		job := &batchv1.Job{}
		if err := suite.c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: jobName}, job); err != nil {
			return err
		}
		if job.Spec.Template.Labels[names.BindLabel] != "true" {
			return fmt.Errorf("Job %s pod template labels %v", jobName, job.Spec.Template.Labels)
		}
		return nil
	})
	// Tether's webhook patched the pod, then the quota refused it: counted as
	// patched, never announced as injected.
	eventually(t, 60*time.Second, "pod creation refused by the quota after Tether's webhook", func() error {
		if n := failedCreates(t, ns, jobName, "exceeded quota"); n == 0 {
			return fmt.Errorf("no FailedCreate for the quota yet")
		}
		if n, _ := suite.metricValue(t, "tether_pod_admissions_total", `outcome="patched"`); n <= patchedBefore {
			return fmt.Errorf("pod webhook not called yet")
		}
		return nil
	})
	time.Sleep(3 * time.Second) // give a wrong "Injected" a chance to show
	if n, _ := suite.metricValue(t, "tether_pods_injected_total"); n != injectedBefore {
		t.Errorf("tether_pods_injected_total went %v -> %v for a pod the quota refused", injectedBefore, n)
	}
	for _, r := range suite.eventReasons(t, ns, name) {
		if r == "Injected" {
			t.Errorf("Injected Event for a pod that was never created")
		}
	}

	// The binding says why no pod exists: the Job's FailedCreate reason.
	suite.waitBinding(t, ns, name, 40*time.Second, "the binding names the Job's FailedCreate", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != tetherv1.PhasePending || wb.Status.Reason != tetherv1.ReasonPodCreateFailed || !strings.Contains(wb.Status.Message, "exceeded quota") {
			return fmt.Errorf("not Pending/PodCreateFailed naming the quota")
		}
		return nil
	})

	// Every replica down.
	for i := range suite.tether.Replicas() {
		if err := suite.tether.KillReplica(i); err != nil {
			t.Fatal(err)
		}
	}
	down := time.Now()
	logf("scenario 9: every Tether replica killed")
	restarted := false
	t.Cleanup(func() {
		if !restarted { // leave the control plane up for the scenarios after this one
			for i := range suite.tether.Replicas() {
				_ = suite.tether.StartReplicaAgain(context.Background(), i)
			}
		}
	})

	// Bound TrainJobs cannot be created now: their webhook fails closed, for
	// bound jobs only. Five are submitted by an orchestrator that retries.
	submitted := suite.submitRetrying(t, ns, outageBoundJobs)
	eventually(t, 30*time.Second, "every bound TrainJob refused while Tether is down", func() error {
		if got := submitted.sofar(); got.refusals < outageBoundJobs || len(got.names) > 0 || got.err != nil {
			return fmt.Errorf("%+v", got)
		}
		return nil
	})

	// Unbound TrainJobs: created, admitted, pods created and Running.
	var unbound []string
	for i := range outageUnboundJobs {
		unbound = append(unbound, fmt.Sprintf("plain-%d", i))
	}
	for _, n := range unbound {
		suite.create(t, trainJob(n, nsUnbound).Queue("bulk").Obj())
	}
	eventually(t, 60*time.Second, "unbound TrainJobs admitted and their pods Running while Tether is down", func() error {
		for _, n := range unbound {
			if ptr.Deref(suite.getTrainJob(t, nsUnbound, n).Spec.Suspend, false) {
				return fmt.Errorf("%s still suspended by Kueue", n)
			}
			pods := suite.trainerPods(t, nsUnbound, n)
			if len(pods) == 0 || pods[0].Status.Phase != corev1.PodRunning {
				return fmt.Errorf("%s: pods %d, not Running yet", n, len(pods))
			}
			if len(pods[0].Spec.InitContainers) != 0 {
				return fmt.Errorf("%s: unbound pod has init containers %v", n, pods[0].Spec.InitContainers)
			}
		}
		return nil
	})
	unboundRunning := time.Since(down)
	for _, n := range unbound {
		if c := failedCreates(t, nsUnbound, n+"-node-0", ""); c != 0 {
			t.Errorf("unbound job %s had %d FailedCreate", n, c)
		}
	}
	logf("scenario 9: %d unbound TrainJobs admitted, pods Running %.1fs after Tether went down", len(unbound), unboundRunning.Seconds())

	// Release the quota: the Job controller now creates the bound pod, which
	// carries tether.dev/bind and so needs pods.tether.dev: refused, retried.
	if err := suite.c.Client.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the bound job's pod creation refused by the failing pod webhook", func() error {
		if n := failedCreates(t, ns, jobName, "pods.tether.dev"); n == 0 {
			return fmt.Errorf("no FailedCreate naming pods.tether.dev yet")
		}
		return nil
	})
	for end := down.Add(outageFor); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if pods := suite.trainerPods(t, ns, name); len(pods) != 0 {
			t.Fatalf("bound job's pod %s was created while Tether is down (init containers %v)", pods[0].Name, pods[0].Spec.InitContainers)
		}
	}
	failedDuringOutage := failedCreates(t, ns, jobName, "pods.tether.dev")

	// Tether back.
	restarting := time.Now()
	for i := range suite.tether.Replicas() {
		if err := suite.tether.StartReplicaAgain(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	restarted = true
	up := time.Now()
	logf("scenario 9: Tether back after %.1fs down", up.Sub(down).Seconds())
	pod := suite.injectedPod(t, ns, name, "")
	waited := pod.CreationTimestamp.Sub(up)
	// How soon depends on the Job controller's own retry of failed pod
	// creations (1s doubling to 60s), not on Tether.
	logf("scenario 9: bound pod %s created and injected %.1fs after Tether was back, on the Job controller's pod-creation back-off (%d FailedCreate naming pods.tether.dev during the outage, %d in all)",
		pod.Name, waited.Seconds(), failedDuringOutage, failedCreates(t, ns, jobName, "pods.tether.dev"))
	for _, p := range suite.trainerPods(t, ns, name) {
		if p.UID != pod.UID {
			t.Errorf("another trainer pod %s exists (injected: %v): a bound pod ran without the sidecar", p.Name, p.Annotations[names.PodStatusAnnotation] != "")
		}
	}
	suite.expectSucceededWithArtifacts(t, pod, name, jobID)
	created := submitted.wait(t, 90*time.Second)
	if created.firstCreated.Before(restarting) {
		t.Errorf("a bound TrainJob was created at %s, before Tether was started again (%s)", created.firstCreated, restarting)
	}
	var lastComplete time.Time
	for _, n := range created.names {
		p := suite.injectedPod(t, ns, n, "")
		tj := suite.getTrainJob(t, ns, n)
		suite.expectSucceededWithArtifacts(t, p, n, tj.Annotations[names.JobIDAnnotation])
		if c := meta.FindStatusCondition(suite.getTrainJob(t, ns, n).Status.Conditions, "Complete"); c != nil && c.LastTransitionTime.After(lastComplete) {
			lastComplete = c.LastTransitionTime.Time
		}
	}
	logf("scenario 9: %d bound TrainJobs submitted during the outage: %d refusals naming trainjobs.tether.dev, none created while down; "+
		"all created %.1fs after Tether was started again, their TrainJobs all Complete %.0fs after it was back, and Succeeded with their artifacts",
		len(created.names), created.refusals, created.lastCreated.Sub(restarting).Seconds(), lastComplete.Sub(up).Seconds())
	eventually(t, 30*time.Second, "one Injected Event, for the pod that exists", func() error {
		var injected []string
		for _, ev := range suite.events(t, ns, name) {
			if ev.Reason == "Injected" {
				injected = append(injected, ev.Note)
			}
		}
		if len(injected) != 1 || !strings.Contains(injected[0], pod.Name) {
			return fmt.Errorf("Injected Events %q, want one naming %s", injected, pod.Name)
		}
		return nil
	})
	for _, n := range unbound {
		if err := suite.c.Client.Delete(ctx, suite.getTrainJob(t, nsUnbound, n)); err != nil {
			t.Error(err)
		}
	}
}

// failedCreates counts the Job controller's FailedCreate Events on Job
// (occurrences, with the Event's count) whose message contains substr.
func failedCreates(t *testing.T, ns, job, substr string) int {
	t.Helper()
	list, err := suite.c.Clientset.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Job,involvedObject.name=" + job + ",reason=FailedCreate"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if strings.Contains(e.Message, substr) {
			n += int(max(e.Count, 1))
			if e.Series != nil {
				n = max(n, int(e.Series.Count))
			}
		}
	}
	return n
}
