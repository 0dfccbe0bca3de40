package binding

import (
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/plugin"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// kubectlWait runs the real kubectl's wait on the job's binding and returns
// its exit code and output.
func kubectlWait(kubeconfig string, j *job, args ...string) (int, string) {
	cmd := exec.Command(env.Kubectl(), append([]string{"--kubeconfig", kubeconfig, "-n", j.ns, "wait", "workerbinding/" + j.name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		return -1, "kubectl did not run: " + err.Error() // Errorf by the caller, which may be another goroutine
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// tetherWait runs kubectl tether wait on the job's binding in-process and
// returns its output and error (what the binary prints after "error: ").
func tetherWait(kubeconfig string, j *job, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := plugin.NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &out})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "-n", j.ns, "wait", j.name}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// wantConditions checks the binding's outcome conditions: each present,
// with the status given and the phase's reason.
func wantConditions(t *testing.T, wb *tetherv1.WorkerBinding, want map[string]metav1.ConditionStatus) {
	t.Helper()
	for typ, s := range want {
		c := meta.FindStatusCondition(wb.Status.Conditions, typ)
		switch {
		case c == nil:
			t.Errorf("%s/%s: no condition %s in %+v", wb.Status.Phase, wb.Status.Reason, typ, wb.Status.Conditions)
		case c.Status != s || c.Reason != wb.Status.Reason || c.ObservedGeneration != wb.Generation:
			t.Errorf("%s/%s: %s=%s reason %s generation %d, want %s, the phase's reason, generation %d",
				wb.Status.Phase, wb.Status.Reason, typ, c.Status, c.Reason, c.ObservedGeneration, s, wb.Generation)
		}
	}
}

// kstatusOf is what kstatus computes for the binding as the API server
// serves it.
func kstatusOf(t *testing.T, j *job) status.Status {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(tetherv1.GroupVersion.WithKind("WorkerBinding"))
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, u); err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// recordVersions records every version of every WorkerBinding written from
// now until the returned function is called; it returns those of namespace.
func recordVersions(t *testing.T) func(namespace string) []tetherv1.WorkerBinding {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &tetherv1.WorkerBindingList{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []tetherv1.WorkerBinding, 1)
	go func() {
		var seen []tetherv1.WorkerBinding
		for ev := range w.ResultChan() {
			if wb, ok := ev.Object.(*tetherv1.WorkerBinding); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				seen = append(seen, *wb)
			}
		}
		done <- seen
	}()
	return func(namespace string) []tetherv1.WorkerBinding {
		w.Stop()
		var out []tetherv1.WorkerBinding
		for _, wb := range <-done {
			if wb.Namespace == namespace {
				out = append(out, wb)
			}
		}
		return out
	}
}

// everyVersionConsistent checks that each version written of a binding
// (whoever wrote it: the controller, the binding server, the orphan
// controller) carries the outcome conditions of its phase.
func everyVersionConsistent(t *testing.T, versions []tetherv1.WorkerBinding, atLeast int) {
	t.Helper()
	phased := 0
	for _, wb := range versions {
		if wb.Status.Phase == "" {
			continue
		}
		phased++
		for _, want := range lifecycle.OutcomeConditions(&wb.Status, lifecycle.ConditionSignals{}, wb.Generation) {
			c := meta.FindStatusCondition(wb.Status.Conditions, want.Type)
			if c == nil || c.Status != want.Status || c.Reason != want.Reason || c.Message != want.Message || c.ObservedGeneration != want.ObservedGeneration {
				t.Errorf("version %s (%s/%s): %s is %+v, want %s/%s", wb.ResourceVersion, wb.Status.Phase, wb.Status.Reason, want.Type, c, want.Status, want.Reason)
			}
		}
	}
	if phased < atLeast {
		t.Errorf("%d versions with a phase written, want at least %d", phased, atLeast)
	}
}

// A job from Pending to Succeeded: the controller and the binding server
// keep the outcome conditions in line with the phase, the real kubectl's
// wait and kubectl tether wait see them, and kstatus reads the binding.
func TestConditionsFollowThePhaseForKubectlWait(t *testing.T) {
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tru, fals := metav1.ConditionTrue, metav1.ConditionFalse
	versions := recordVersions(t)
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	pending := j.binding(t)
	wantConditions(t, pending, map[string]metav1.ConditionStatus{tetherv1.ConditionReady: fals, tetherv1.ConditionSucceeded: fals,
		tetherv1.ConditionFailed: fals, tetherv1.ConditionProgressing: tru, tetherv1.ConditionReconciling: tru, tetherv1.ConditionStalled: fals})
	failedSince := meta.FindStatusCondition(pending.Status.Conditions, tetherv1.ConditionFailed).LastTransitionTime

	runningClient(t, j.clientConfig())
	running := j.waitPhase(t, tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating)
	wantConditions(t, running, map[string]metav1.ConditionStatus{tetherv1.ConditionReady: tru, tetherv1.ConditionSucceeded: fals,
		tetherv1.ConditionProgressing: tru, tetherv1.ConditionReconciling: tru})
	if code, out := kubectlWait(kubeconfig, j, "--for=condition=Ready", "--timeout=30s"); code != 0 {
		t.Fatalf("kubectl wait --for=condition=Ready on a Running binding: exit %d: %s", code, out)
	}
	if got := kstatusOf(t, j); got != status.InProgressStatus {
		t.Errorf("kstatus of a Running binding: %s, want InProgress", got)
	}
	// The printer column: PHASE, then READY.
	out, err := exec.Command(env.Kubectl(), "--kubeconfig", kubeconfig, "-n", j.ns, "get", "workerbinding", j.name, "--no-headers=false").CombinedOutput()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err != nil || len(lines) != 2 ||
		!regexp.MustCompile(`PHASE\s+READY\s`).MatchString(lines[0]) || !regexp.MustCompile(`Running\s+True\s`).MatchString(lines[1]) {
		t.Errorf("kubectl get workerbinding: %v\n%s", err, out)
	}
	// Not met yet: both waits time out, saying so as kubectl does.
	if code, out := kubectlWait(kubeconfig, j, "--for=condition=Succeeded", "--timeout=1s"); code == 0 || !strings.Contains(out, "timed out waiting for the condition on workerbindings/"+j.name) {
		t.Errorf("kubectl wait --for=condition=Succeeded on a Running binding: exit %d: %s", code, out)
	}
	if _, err := tetherWait(kubeconfig, j, "--for=condition=Succeeded", "--timeout=1s"); err == nil || err.Error() != "timed out waiting for the condition on workerbindings/"+j.name {
		t.Errorf("kubectl tether wait --for=condition=Succeeded on a Running binding: %v", err)
	}

	// kubectl waits from before the job ends until it succeeds.
	type result struct {
		code int
		out  string
	}
	waited := make(chan result, 1)
	go func() {
		code, out := kubectlWait(kubeconfig, j, "--for=condition=Succeeded", "--timeout=60s")
		waited <- result{code, out}
	}()
	j.write(t, "model.bin", []byte("weights"))
	if rep, err := j.syncer(t).Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v (%+v)", err, rep)
	}
	j.waitArtifacts(t)
	finishTrainer(t, j, 0)
	setTrainJobCondition(t, j, "Complete", "jobset completed")
	r := <-waited
	if r.code != 0 || strings.TrimSpace(r.out) != "workerbinding.tether.dev/"+j.name+" condition met" {
		t.Fatalf("kubectl wait --for=condition=Succeeded: exit %d: %s", r.code, r.out)
	}
	done := j.binding(t)
	if done.Status.Phase != tetherv1.PhaseSucceeded {
		t.Fatalf("kubectl wait returned on a %s binding", done.Status.Phase)
	}
	wantConditions(t, done, map[string]metav1.ConditionStatus{tetherv1.ConditionReady: tru, tetherv1.ConditionSucceeded: tru,
		tetherv1.ConditionFailed: fals, tetherv1.ConditionProgressing: fals, tetherv1.ConditionReconciling: fals, tetherv1.ConditionStalled: fals})
	if c := meta.FindStatusCondition(done.Status.Conditions, tetherv1.ConditionFailed); !c.LastTransitionTime.Equal(&failedSince) {
		t.Errorf("Failed stayed False from Pending to Succeeded, yet its lastTransitionTime moved from %s to %s", failedSince, c.LastTransitionTime)
	}
	if got := kstatusOf(t, j); got != status.CurrentStatus {
		t.Errorf("kstatus of a Succeeded binding: %s, want Current", got)
	}
	// Pending, Registered, Running, Finishing, Succeeded at least.
	everyVersionConsistent(t, versions(j.ns), 5)

	// On the final binding: what is met returns at once, what cannot be
	// met any more fails at once (not at the 10m timeout).
	for _, c := range []struct{ arg, wantErr string }{
		{"--for=jsonpath={.status.phase}=Succeeded", ""},
		{"--for=condition=Failed=false", ""},
		{"--for=condition=Failed", "with condition Failed=False, which can no longer become True"},
		{"--for=jsonpath={.status.phase}=Failed", "ended Succeeded"},
		{"--for=phase=Failed", "ended Succeeded"},
	} {
		out, err := tetherWait(kubeconfig, j, c.arg, "--timeout=10m")
		switch {
		case c.wantErr == "" && (err != nil || strings.TrimSpace(out) != "workerbinding.tether.dev/"+j.name+" condition met"):
			t.Errorf("kubectl tether wait %s on a Succeeded binding: %q, %v", c.arg, out, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("kubectl tether wait %s on a Succeeded binding: %v, want an error with %q", c.arg, err, c.wantErr)
		}
	}
}

// A binding whose TrainJob is deleted ends Failed (the orphan controller's
// write): Failed and Stalled True, kubectl wait sees it, kstatus says Failed.
func TestConditionsOfABindingThatFailed(t *testing.T) {
	kubeconfig, err := env.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	versions := recordVersions(t)
	j := newJob(t, nil)
	// No garbage collector runs here: the binding stays, as with orphan.
	if err := env.Client.Delete(context.Background(), testobj.MakeTrainJob(j.name, j.ns).Obj(), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		t.Fatal(err)
	}
	if code, out := kubectlWait(kubeconfig, j, "--for=condition=Failed", "--timeout=60s"); code != 0 {
		t.Fatalf("kubectl wait --for=condition=Failed: exit %d: %s", code, out)
	}
	wb := j.binding(t)
	fals, tru := metav1.ConditionFalse, metav1.ConditionTrue
	wantConditions(t, wb, map[string]metav1.ConditionStatus{tetherv1.ConditionReady: fals, tetherv1.ConditionSucceeded: fals,
		tetherv1.ConditionFailed: tru, tetherv1.ConditionProgressing: fals, tetherv1.ConditionReconciling: fals, tetherv1.ConditionStalled: tru})
	if c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionFailed); c.Message != wb.Status.Message {
		t.Errorf("Failed says %q, the phase %q", c.Message, wb.Status.Message)
	}
	if got := kstatusOf(t, j); got != status.FailedStatus {
		t.Errorf("kstatus of a Failed binding: %s, want Failed", got)
	}
	everyVersionConsistent(t, versions(j.ns), 2)
	if _, err := tetherWait(kubeconfig, j, "--for=condition=Succeeded", "--timeout=10m"); err == nil || !strings.Contains(err.Error(), "ended Failed") {
		t.Errorf("kubectl tether wait --for=condition=Succeeded on a Failed binding: %v, want it to end at once", err)
	}
}
