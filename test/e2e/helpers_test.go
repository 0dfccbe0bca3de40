package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// plans holds each TrainJob's trainer plan, by namespace/name; a TrainJob's
// pods take the next plan in its list (one per attempt), the last one repeats.
var plans sync.Map // string -> []localcluster.TrainerPlan

func setPlans(ns, name string, p ...localcluster.TrainerPlan) { plans.Store(ns+"/"+name, p) }

var attempts sync.Map // "ns/name" -> the next plan index

func planFor(pod *corev1.Pod) localcluster.TrainerPlan {
	key := pod.Namespace + "/" + pod.Labels[trainjob.JobSetNameLabel]
	v, ok := plans.Load(key)
	if !ok {
		return localcluster.TrainerPlan{}
	}
	list := v.([]localcluster.TrainerPlan)
	n, _ := attempts.LoadOrStore(key, new(int))
	i := *(n.(*int))
	*(n.(*int)) = i + 1
	if i >= len(list) {
		i = len(list) - 1
	}
	return list[i]
}

var nsSeq struct {
	sync.Mutex
	n int
}

// newNamespace creates a namespace, with a LocalQueue "user-queue" when the
// cluster runs Kueue; its state is logged if the test fails.
func (e *env) newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	nsSeq.Lock()
	nsSeq.n++
	name := fmt.Sprintf("%s-%d", prefix, nsSeq.n)
	nsSeq.Unlock()
	ctx := context.Background()
	if err := e.c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	if e.c.Opts.Kueue {
		if err := e.c.LocalQueue(ctx, name, "user-queue"); err != nil {
			t.Fatal(err)
		}
	}
	// Registered before the dump, so it runs after it: a failed scenario's
	// TrainJobs are deleted, and their pods free what they hold on the
	// nodes (the real node's host ports, kwok's CPU) for the scenarios
	// after it (r2's failure once left r3-r7 unschedulable).
	t.Cleanup(func() {
		if t.Failed() {
			if err := e.c.Client.DeleteAllOf(context.Background(), &trainer.TrainJob{}, client.InNamespace(name)); err != nil {
				t.Logf("deleting the failed scenario's TrainJobs: %v", err)
			}
		}
	})
	e.dumpOnFailure(t, name)
	return name
}

// trainJob starts a TrainJob on the e2e runtime; bound ones heartbeat every second.
func trainJob(name, ns string) *testobj.TrainJobWrapper {
	w := testobj.MakeTrainJob(name, ns)
	w.Spec.RuntimeRef.Name = localcluster.RuntimeName
	return w
}

func bound(w *testobj.TrainJobWrapper) *testobj.TrainJobWrapper {
	return w.Bound().Annotation(names.HeartbeatIntervalAnnotation, "1s")
}

func (e *env) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := e.c.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// eventually retries check every 200ms until it returns nil or timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = check(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) getBinding(ns, name string) (*tetherv1.WorkerBinding, error) {
	wb := &tetherv1.WorkerBinding{}
	return wb, e.c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, wb)
}

// waitBinding waits until the WorkerBinding satisfies ok (which explains
// what is missing) and returns it.
func (e *env) waitBinding(t *testing.T, ns, name string, timeout time.Duration, what string, ok func(*tetherv1.WorkerBinding) error) *tetherv1.WorkerBinding {
	t.Helper()
	var wb *tetherv1.WorkerBinding
	eventually(t, timeout, what, func() error {
		var err error
		if wb, err = e.getBinding(ns, name); err != nil {
			return err
		}
		if err := ok(wb); err != nil {
			return fmt.Errorf("%w (phase %s/%s: %s)", err, wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
		}
		return nil
	})
	logf("%s/%s: %s (phase %s/%s)", ns, name, what, wb.Status.Phase, wb.Status.Reason)
	return wb
}

func phaseIs(phase tetherv1.WorkerBindingPhase, reason string) func(*tetherv1.WorkerBinding) error {
	return func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != phase || (reason != "" && wb.Status.Reason != reason) {
			return fmt.Errorf("want %s/%s", phase, reason)
		}
		return nil
	}
}

func (e *env) getTrainJob(t *testing.T, ns, name string) *trainer.TrainJob {
	t.Helper()
	tj := &trainer.TrainJob{}
	if err := e.c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

// trainerPods lists the TrainJob's trainer pods (replicated job "node").
func (e *env) trainerPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := e.c.Client.List(context.Background(), &pods, client.InNamespace(ns),
		client.MatchingLabels{trainjob.JobSetNameLabel: name, trainjob.ReplicatedJobNameLabel: "node"}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// startRunning sets name's trainer plan, creates its bound TrainJob in
// user-queue, and waits for the injected trainer pod and the binding
// Running (heartbeating): the opening of the scenarios that then break
// something mid-job.
func (e *env) startRunning(t *testing.T, ns, name string, plan localcluster.TrainerPlan) (jobID string, pod *corev1.Pod) {
	t.Helper()
	setPlans(ns, name, plan)
	tj := bound(trainJob(name, ns)).Queue("user-queue").Obj()
	e.create(t, tj)
	pod = e.injectedPod(t, ns, name, "")
	e.waitBinding(t, ns, name, 60*time.Second, "Running", phaseIs(tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating))
	return tj.Annotations[names.JobIDAnnotation], pod
}

// injectedPod waits for a running injected trainer pod other than skip.
func (e *env) injectedPod(t *testing.T, ns, name string, skip types.UID) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	eventually(t, 60*time.Second, "an injected trainer pod of "+name, func() error {
		var seen []string
		for _, p := range e.trainerPods(t, ns, name) {
			if p.UID != skip && p.DeletionTimestamp == nil && trainjob.IsInjected(&p) {
				found = p.DeepCopy()
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s (deleting %v, annotations %v)", p.Name, p.DeletionTimestamp != nil, p.Annotations))
		}
		return fmt.Errorf("no pod with annotation %s yet; seen %v", names.PodStatusAnnotation, seen)
	})
	logf("%s/%s: injected pod %s", ns, name, found.Name)
	return found
}

// eventReasons lists the reasons of the Events about the TrainJob, oldest first.
func (e *env) eventReasons(t *testing.T, ns, name string) []string {
	t.Helper()
	var reasons []string
	for _, ev := range e.events(t, ns, name) {
		reasons = append(reasons, ev.Reason)
	}
	return reasons
}

// events lists the Events about the TrainJob.
func (e *env) events(t *testing.T, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := e.c.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "TrainJob" && ev.Regarding.Name == name {
			out = append(out, ev)
		}
	}
	return out
}

func hasAll(have []string, want ...string) error {
	set := map[string]bool{}
	for _, h := range have {
		set[h] = true
	}
	var missing []string
	for _, w := range want {
		if !set[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %v in %v", missing, have)
	}
	return nil
}

// metricValue sums name{labels...} over the scraped text of every replica
// (per-job series come from one replica: the session holder or the leader;
// counters are per replica); labels are matched as substrings of the label
// set. ok=false if no replica has the series.
func (e *env) metricValue(t *testing.T, name string, labels ...string) (float64, bool) {
	t.Helper()
	text, err := e.tether.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return findMetric(text, name, labels...)
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

func findMetric(text, name string, labels ...string) (float64, bool) {
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(m[2], l) {
				match = false
				break
			}
		}
		if match {
			if v, err := strconv.ParseFloat(m[3], 64); err == nil {
				sum, found = sum+v, true
			}
		}
	}
	return sum, found
}

func jobLabels(ns, name string) []string {
	return []string{`namespace="` + ns + `"`, `trainjob="` + name + `"`}
}

// podNow is the pod's current state (nil once deleted).
func (e *env) podNow(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	if err := e.c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pod); err != nil {
		return nil
	}
	return pod
}

// trainerTerminated says whether the pod's trainer container has ended.
func trainerTerminated(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == "node" && s.State.Terminated != nil {
			return true
		}
	}
	return false
}

// dumpOnFailure logs the namespace's pods, TrainJobs (read unstructured:
// any Trainer version), WorkerBindings and Events when the test failed, so
// a CI log says where the flow stopped.
func (e *env) dumpOnFailure(t *testing.T, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx := context.Background()
		var pods corev1.PodList
		_ = e.c.Client.List(ctx, &pods, client.InNamespace(ns))
		for _, p := range pods.Items {
			t.Logf("pod %s: phase %s node %q deleting %v injected %v labels %v", p.Name, p.Status.Phase, p.Spec.NodeName,
				p.DeletionTimestamp != nil, p.Annotations[names.PodStatusAnnotation] != "", p.Labels)
			for _, c := range p.Status.Conditions {
				t.Logf("  condition %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
			}
			for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				t.Logf("  container %s: running %v terminated %+v", cs.Name, cs.State.Running != nil, cs.State.Terminated)
			}
		}
		tjs := &unstructured.UnstructuredList{}
		tjs.SetGroupVersionKind(trainer.GroupVersion.WithKind("TrainJobList"))
		_ = e.c.Client.List(ctx, tjs, client.InNamespace(ns))
		for _, tj := range tjs.Items {
			t.Logf("trainjob %s: annotations %v spec %v status %v", tj.GetName(), tj.GetAnnotations(), tj.Object["spec"], tj.Object["status"])
		}
		var wbs tetherv1.WorkerBindingList
		_ = e.c.Client.List(ctx, &wbs, client.InNamespace(ns))
		for _, wb := range wbs.Items {
			t.Logf("workerbinding %s: spec %+v status %+v", wb.Name, wb.Spec, wb.Status)
		}
		var evs corev1.EventList
		_ = e.c.Client.List(ctx, &evs, client.InNamespace(ns))
		for _, ev := range evs.Items {
			t.Logf("event %s/%s %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
		t.Logf("cluster logs in %s (set TETHER_E2E_KEEP=1 to keep them)", filepath.Join(e.c.Dir, "logs"))
	})
}

// pauseSidecar stops the pod's sidecar process (SIGSTOP), as a hung or
// partitioned sidecar, and returns resume (SIGCONT); the test's cleanup
// resumes it if the test did not.
func (e *env) pauseSidecar(t *testing.T, pod types.UID) (resume func()) {
	t.Helper()
	sidecar := e.runner.Sidecar(pod)
	if sidecar == nil {
		t.Fatalf("no sidecar process for pod %s", pod)
	}
	if err := sidecar.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := sidecar.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("resuming the sidecar: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}
