package binding

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// workloadRules are Kueue's Workloads with verbs: what a cancel of a job
// Kueue manages needs besides the orchestrator's rules.
func workloadRules(verbs ...string) []rbacv1.PolicyRule {
	return append(append([]rbacv1.PolicyRule{}, testenv.OrchestratorRules...),
		rbacv1.PolicyRule{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads"}, Verbs: verbs})
}

// orchestrator is client.New with the credentials of a ServiceAccount of
// j's namespace holding only rules.
func orchestrator(t *testing.T, j *job, rules []rbacv1.PolicyRule) *client.Client {
	t.Helper()
	tenant, err := env.NewTenant(context.Background(), j.ns, rules)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(tenant.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// workloadOf creates the Kueue Workload of j's TrainJob, as Kueue would:
// owned by the TrainJob, labelled with its UID, active.
func workloadOf(t *testing.T, j *job) *unstructured.Unstructured {
	t.Helper()
	tj := trainjob.New()
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, tj); err != nil {
		t.Fatal(err)
	}
	wl := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"active": true, "queueName": "user-queue"}}}
	wl.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	wl.SetKind("Workload")
	wl.SetNamespace(j.ns)
	wl.SetName("trainjob-" + j.name + "-1a2b3")
	wl.SetLabels(map[string]string{"kueue.x-k8s.io/job-uid": string(tj.GetUID())})
	wl.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: trainjob.GVK.GroupVersion().String(), Kind: trainjob.GVK.Kind,
		Name: j.name, UID: tj.GetUID(), Controller: ptr.To(true)}})
	mustCreate(t, wl)
	return wl
}

func workloadActive(t *testing.T, wl *unstructured.Unstructured) bool {
	t.Helper()
	got := wl.DeepCopy()
	if err := env.Client.Get(context.Background(), crclient.ObjectKeyFromObject(wl), got); err != nil {
		t.Fatal(err)
	}
	active, found, _ := unstructured.NestedBool(got.Object, "spec", "active")
	return !found || active
}

// TestCancelWithoutPermissionToStopSendsNothing: an orchestrator that may
// list Kueue's Workloads but not patch them cannot cancel: the error names
// the verb, the resource and the namespace, and the binding was sent no
// command (no annotation, no lastCommand), its Workload untouched.
func TestCancelWithoutPermissionToStopSendsNothing(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	wl := workloadOf(t, j)

	c := orchestrator(t, j, workloadRules("get", "list"))
	_, err := c.Cancel(context.Background(), j.ns, j.name, client.CancelOptions{Timeout: 10 * time.Second})
	var pe *client.PermissionError
	if !errors.As(err, &pe) || pe.Verb != "patch" || pe.Resource != "workloads.kueue.x-k8s.io" || pe.Namespace != j.ns {
		t.Fatalf("cancel without patch on workloads: %v, want a PermissionError for patch workloads.kueue.x-k8s.io in %s", err, j.ns)
	}
	for _, s := range []string{"patch", "workloads.kueue.x-k8s.io", "namespace " + j.ns, "nothing was sent"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	wb := j.binding(t)
	if v, ok := wb.Annotations[names.CommandAnnotation]; ok || wb.Status.LastCommand != nil {
		t.Errorf("a refused cancel sent a command: annotation %q, lastCommand %+v", v, wb.Status.LastCommand)
	}
	if wb.Status.Phase != tetherv1.PhaseRunning {
		t.Errorf("binding %s/%s after a refused cancel, want Running", wb.Status.Phase, wb.Status.Reason)
	}
	if !workloadActive(t, wl) {
		t.Error("a refused cancel deactivated the Workload")
	}

}

// TestCancelFlushesThenDeactivatesTheWorkload: with list and patch on
// Workloads, client.Cancel has every node flush (the sidecar's session
// runs the command), then sets the Workload's spec.active to false with
// the orchestrator's credentials. The binding says Cancelling while the
// trainer pod remains and Cancelled once it is gone (Kueue would evict it).
func TestCancelFlushesThenDeactivatesTheWorkload(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	cfg := j.clientConfig()
	cancels := make(chan string, 4)
	cfg.OnCommand = func(_ context.Context, cmd binding.Command) error {
		cancels <- cmd.Name
		return nil
	}
	runningClient(t, cfg)
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	wl := workloadOf(t, j)

	c := orchestrator(t, j, workloadRules("list", "patch"))
	res, err := c.Cancel(context.Background(), j.ns, j.name, client.CancelOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if got := <-cancels; got != binding.CommandCancel {
		t.Errorf("the worker ran %q, want %q", got, binding.CommandCancel)
	}
	if res.Command == nil || res.Command.State != tetherv1.CommandAcknowledged || res.Stop.Action != client.StopDeactivateWorkload || res.Stop.Name != wl.GetName() {
		t.Errorf("cancel result: command %+v, stop %+v; want acknowledged, Workload %s deactivated", res.Command, res.Stop, wl.GetName())
	}
	if workloadActive(t, wl) {
		t.Error("the Workload is still active after the cancel")
	}
	j.waitPhase(t, tetherv1.PhaseFinishing, tetherv1.ReasonCancelling)
	if err := env.Client.Delete(context.Background(), j.pod, crclient.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	wb := j.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonCancelled)
	if !strings.Contains(wb.Status.Message, "cancel "+res.CommandID+" acknowledged") {
		t.Errorf("Cancelled's message %q does not name the acknowledged command %s", wb.Status.Message, res.CommandID)
	}
}

// TestCancelWithoutKueueSuspendsTheTrainJobEvenWhenTheFlushTimesOut: a
// TrainJob no Workload holds is suspended; a flush nobody acknowledges
// (no sidecar is connected) still stops the job, and the error says so.
func TestCancelWithoutKueueSuspendsTheTrainJobEvenWhenTheFlushTimesOut(t *testing.T) {
	j := newJob(t, nil)
	withSuspend := append(workloadRules("list"), rbacv1.PolicyRule{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: []string{"patch"}})

	_, err := orchestrator(t, j, workloadRules("list")).Cancel(context.Background(), j.ns, j.name, client.CancelOptions{Timeout: time.Second})
	var pe *client.PermissionError
	if !errors.As(err, &pe) || pe.Verb != "patch" || pe.Resource != "trainjobs.trainer.kubeflow.org" {
		t.Fatalf("cancel without patch on trainjobs: %v, want a PermissionError for patch trainjobs.trainer.kubeflow.org", err)
	}

	// The tenant's Role is replaced by one that may suspend the job.
	role := &rbacv1.Role{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: "tenant"}, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = withSuspend
	if err := env.Client.Update(context.Background(), role); err != nil {
		t.Fatal(err)
	}
	c := orchestrator(t, j, withSuspend)
	var res *client.CancelResult
	testenv.Eventually(t, 10*time.Second, func() error {
		res, err = c.Cancel(context.Background(), j.ns, j.name, client.CancelOptions{Timeout: 2 * time.Second})
		if errors.As(err, &pe) {
			return err // the Role's update not yet in the authorizer's cache
		}
		return nil
	})
	var fe *client.CancelFlushError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "no acknowledgement") || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("cancel with an unanswered flush: %v, want a CancelFlushError saying the job was suspended anyway", err)
	}
	if res.Stop.Action != client.StopSuspendTrainJob {
		t.Errorf("stop %+v, want the TrainJob suspended", res.Stop)
	}
	tj := trainjob.New()
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, tj); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := unstructured.NestedBool(tj.Object, "spec", "suspend"); !s {
		t.Error("the TrainJob is not suspended after the cancel")
	}
	if v := j.binding(t).Annotations[names.CommandAnnotation]; !strings.HasPrefix(v, binding.CommandCancel+":") {
		t.Errorf("command annotation %q, want the cancel sent", v)
	}
}

// TestCancelledJobResumedStartsANewAttempt: after a cancel whose pods are
// gone (Failed/Cancelled), the job is resumed: its new pod's sidecar
// registers (the binding server admits it for a cancelled binding), and
// the binding runs attempt 2, started by readmission, on the same token.
func TestCancelledJobResumedStartsANewAttempt(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	_, stop, done := runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	command(t, j, "cancel:1")
	j.waitPhase(t, tetherv1.PhaseFinishing, tetherv1.ReasonCancelling)
	if err := env.Client.Delete(context.Background(), j.pod, crclient.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	j.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonCancelled)
	stop()
	<-done
	// Until it is resumed the job has ended: its token registers nothing
	// but a new pod of the job (the cancelled attempt's pod is gone).
	p := newRawPeer(t, j)
	if code, e := p.register(p.headers(), p.registerBody()); code != http.StatusGone || e.Code != binding.ErrBindingFinished {
		t.Errorf("register for the cancelled attempt's pod: %d %+v, want 410 BindingFinished", code, e)
	}

	// Resumed: the Job controller creates the node's pod again.
	secret := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: binding.TokenSecretName(j.name)}, secret); err != nil {
		t.Fatal(err)
	}
	j.pod = testobj.MakeTrainerPod(j.name, j.ns).Routed().Obj()
	mustCreate(t, j.pod)
	j.writeFiles(t, secret)
	runningClient(t, j.clientConfig())
	wb := j.waitPhase(t, tetherv1.PhaseRunning, "")
	if wb.Status.Attempt != 2 || wb.Status.AttemptStartedBy != tetherv1.AttemptReadmission {
		t.Errorf("resumed job: attempt %d started by %q, want 2 by %s", wb.Status.Attempt, wb.Status.AttemptStartedBy, tetherv1.AttemptReadmission)
	}
	if n := wb.Status.Nodes; len(n) == 0 || n[0].PodUID != string(j.pod.UID) {
		t.Errorf("resumed job's node 0 is %+v, want pod %s", n, j.pod.Name)
	}
}

// TestCancelWithDeleteDeletesTheTrainJob: with CancelOptions.Delete the
// stop is the TrainJob's deletion, with the orchestrator's credentials: a
// caller who may only patch it is refused before anything is sent, one who
// may delete it has every node flush, then the TrainJob is gone.
func TestCancelWithDeleteDeletesTheTrainJob(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	cfg := j.clientConfig()
	cfg.OnCommand = func(context.Context, binding.Command) error { return nil } // the flush
	runningClient(t, cfg)
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	trainJobs := func(verbs ...string) []rbacv1.PolicyRule {
		return append(workloadRules("list"), rbacv1.PolicyRule{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: verbs})
	}

	_, err := orchestrator(t, j, trainJobs("patch")).Cancel(context.Background(), j.ns, j.name, client.CancelOptions{Timeout: 10 * time.Second, Delete: true})
	var pe *client.PermissionError
	if !errors.As(err, &pe) || pe.Verb != "delete" || pe.Resource != "trainjobs.trainer.kubeflow.org" || pe.Namespace != j.ns {
		t.Fatalf("cancel --delete without delete on trainjobs: %v, want a PermissionError for delete trainjobs.trainer.kubeflow.org in %s", err, j.ns)
	}
	if wb := j.binding(t); wb.Status.LastCommand != nil || wb.Annotations[names.CommandAnnotation] != "" {
		t.Fatalf("a refused cancel --delete sent a command: %+v", wb.Status.LastCommand)
	}

	role := &rbacv1.Role{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: "tenant"}, role); err != nil {
		t.Fatal(err)
	}
	role.Rules = trainJobs("delete")
	if err := env.Client.Update(context.Background(), role); err != nil {
		t.Fatal(err)
	}
	c := orchestrator(t, j, trainJobs("delete"))
	var res *client.CancelResult
	testenv.Eventually(t, 10*time.Second, func() error {
		res, err = c.Cancel(context.Background(), j.ns, j.name, client.CancelOptions{Timeout: 20 * time.Second, Delete: true})
		if errors.As(err, &pe) {
			return err // the Role's update not yet in the authorizer's cache
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cancel --delete: %v", err)
	}
	if res.Command == nil || res.Command.State != tetherv1.CommandAcknowledged || res.Stop.Action != client.StopDeleteTrainJob {
		t.Errorf("cancel --delete result: command %+v, stop %+v; want acknowledged, then the TrainJob deleted", res.Command, res.Stop)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, trainjob.New())
		if err == nil {
			return errors.New("the TrainJob still exists")
		}
		return crclient.IgnoreNotFound(err)
	})
}
