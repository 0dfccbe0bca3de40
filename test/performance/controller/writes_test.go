package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// writesNamespace holds the binding writes the benchmark makes itself; they
// are deleted before the control plane is elected.
const writesNamespace = "bench-writes"

// bindingWrite is one kind of API write a new binding costs, made for n
// TrainJobs in a sub-phase of its own: the time its writes took (for the
// token Secrets and WorkerBindings, until the benchmark's watch saw the
// last one, as the bind's time is taken), and the CPU it took with a second
// more for the watches' fan-out.
type bindingWrite struct {
	name string
	took time.Duration
	cpu  cpuUse
}

// bindingWrites makes, from the benchmark's client, the writes the control
// plane makes to bind n TrainJobs (job-<i>, which do not exist in
// writesNamespace: nothing reacts to them, no replica is elected yet), one
// kind at a time: the token Secret, the WorkerBinding, its first status,
// and the Bound Event. Each kind's API-server CPU against the floor's per
// plain object says what a binding's writes cost by themselves, apart from
// the controller that makes them; matchesBind checks afterwards that these
// stand-ins are what the control plane wrote. The objects are deleted at the
// end (that deletion is in no figure).
func bindingWrites(b *testing.B, ctx context.Context, cl client.WithWatch, cfg *rest.Config, ca []byte, n, clients int) []bindingWrite {
	b.Helper()
	createNamespace(b, ctx, cl, writesNamespace)
	settings := standInSettings(b)
	stands := make([]standIn, n)
	for i := range n {
		stands[i] = newStandIn(b, i, writesNamespace, ca, settings)
	}
	var out []bindingWrite
	// step makes one kind of write for every stand-in. With a list, the
	// kind's creates are timed as the bind's are: from the first write
	// until a watch (opened before it, in writesNamespace) saw the last.
	step := func(name string, list client.ObjectList, key func(i int) string, write func(i int) error) {
		var seen func(time.Time) seenTimes
		if list != nil {
			want := make(map[string]bool, n)
			for i := range n {
				want[fmt.Sprintf("%T/%s", list, key(i))] = true
			}
			seen = watchAll(b, ctx, cl, want, client.MatchingLabels{names.BindLabel: names.BindValue}, writesNamespace, list)
		}
		var profiled func()
		if dir := os.Getenv("TETHER_BENCH_WRITES_CPUPROFILE"); dir != "" {
			// 2 s: each kind of write took 1.2 to 4 s for 2,000 here.
			profiled = profileAPIServer(b, ctx, cfg, filepath.Join(dir, name+".pprof"), 2)
		}
		start, cpu0 := time.Now(), readCPU(b)
		doAll(b, n, clients, write)
		took := time.Since(start)
		if seen != nil {
			took = seen(start).all()
		}
		if profiled != nil {
			profiled()
		}
		// A second for the watches' fan-out of the last writes.
		time.Sleep(time.Second)
		out = append(out, bindingWrite{name: name, took: took, cpu: readCPU(b).sub(cpu0)})
	}
	step("token-secret", &corev1.SecretList{}, func(i int) string { return stands[i].secret.Name },
		func(i int) error { return cl.Create(ctx, stands[i].secret) })
	step("workerbinding", &tetherv1.WorkerBindingList{}, func(i int) string { return stands[i].wb.Name },
		func(i int) error { return cl.Create(ctx, stands[i].wb) })
	step("workerbinding-status", nil, nil, func(i int) error {
		firstStatus(stands[i].wb)
		return cl.Status().Update(ctx, stands[i].wb)
	})
	step("bound-event", nil, nil, func(i int) error {
		now := metav1.Now()
		wb := stands[i].wb
		return cl.Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", wb.Name, now.UnixNano()), Namespace: writesNamespace},
			InvolvedObject: stands[i].trainJob, Reason: lifecycle.ReasonBound, Type: corev1.EventTypeNormal,
			Message: fmt.Sprintf("bound as job %s, worker %s; token Secret %s", wb.Spec.JobID, wb.Spec.WorkerID, wb.Spec.TokenSecretName),
			// The control plane's recorder's source and reporting controller.
			Source: corev1.EventSource{Component: "tether"}, ReportingController: "tether",
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		})
	})
	for _, o := range []client.Object{&tetherv1.WorkerBinding{}, &corev1.Secret{}, &corev1.Event{}} {
		if err := cl.DeleteAllOf(ctx, o, client.InNamespace(writesNamespace)); err != nil {
			b.Fatalf("deleting the benchmark's own binding writes (%T): %v", o, err)
		}
	}
	return out
}

// standIn is what the control plane writes to bind TrainJob job-<i> of
// namespace ns, as the benchmark makes it: the token Secret and the
// WorkerBinding (its status is firstStatus), and the TrainJob its Bound
// Event is about. The TrainJob's uid is made up; no garbage collector runs
// here.
type standIn struct {
	trainJob corev1.ObjectReference
	secret   *corev1.Secret
	wb       *tetherv1.WorkerBinding
}

func newStandIn(b *testing.B, i int, ns string, ca []byte, settings tetherv1.WorkerBindingSettings) standIn {
	b.Helper()
	name := fmt.Sprintf("job-%05d", i)
	token, err := binding.NewToken()
	if err != nil {
		b.Fatal(err)
	}
	uid := types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
	owner := []metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: name, UID: uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	labels := map[string]string{names.BindLabel: names.BindValue}
	jobID, workerID := standInIDs(i)
	return standIn{
		trainJob: corev1.ObjectReference{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: ns, Name: name, UID: uid},
		secret: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: binding.TokenSecretName(name), Namespace: ns, Labels: labels, OwnerReferences: owner},
			Type: names.TokenSecretType, Data: map[string][]byte{names.TokenKey: []byte(token), names.CABundleKey: ca}},
		wb: &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: owner},
			Spec: tetherv1.WorkerBindingSpec{TrainJobName: name, JobID: jobID, WorkerID: workerID, TokenSecretName: binding.TokenSecretName(name),
				TokenSHA256: token.Hash(), Settings: settings}},
	}
}

// standInSettings are the settings the control plane records for a
// TrainJob with only the label: the defaults.
func standInSettings(b *testing.B) tetherv1.WorkerBindingSettings {
	b.Helper()
	s, err := jobconfig.Parse(nil)
	if err != nil {
		b.Fatal(err)
	}
	return lifecycle.RecordSettings(s)
}

// standInIDs are job and worker ids of the lengths the webhook stamps on a
// TrainJob of namespace "bench".
func standInIDs(i int) (jobID, workerID string) {
	return binding.ScopedJobID("bench", "00000000-0000-4000-8000-000000000000", fmt.Sprintf("%016x", i)), fmt.Sprintf("%016x-%016x", i, uint64(i)<<20)
}

// firstStatus is a new binding's first status as the binding controller
// writes it for a TrainJob with no pod yet (workerbinding.Reconciler.updateStatus);
// matchesBind holds the two together.
func firstStatus(wb *tetherv1.WorkerBinding) {
	lifecycle.Initial(&wb.Status)
	wb.Status.ObservedGeneration = wb.Generation
	now := metav1.Now()
	wb.Status.Conditions = []metav1.Condition{
		{Type: tetherv1.ConditionTokenIssued, Status: metav1.ConditionTrue, Reason: tetherv1.ReasonTokenIssued,
			Message: "token Secret " + wb.Spec.TokenSecretName, ObservedGeneration: wb.Generation, LastTransitionTime: now},
		{Type: tetherv1.ConditionPodsInjected, Status: metav1.ConditionUnknown, Reason: tetherv1.ReasonNoPods,
			Message: "no running trainer pod yet", ObservedGeneration: wb.Generation, LastTransitionTime: now},
	}
	lifecycle.SetOutcomeConditions(&wb.Status, wb.Generation)
}

// matchesBind fails the run when the benchmark's stand-in writes differ from
// what the control plane wrote for job-00000: the same status but for
// times, the same spec but for its token and ids, whose lengths match, and a
// token Secret of the same size. The stand-ins were deleted; job-00000's is
// built again here (newStandIn).
func matchesBind(b *testing.B, ctx context.Context, cl client.Client, ns string, ca []byte) {
	b.Helper()
	var wb tetherv1.WorkerBinding
	var secret corev1.Secret
	key := types.NamespacedName{Namespace: ns, Name: "job-00000"}
	if err := cl.Get(ctx, key, &wb); err != nil {
		b.Fatal(err)
	}
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName(key.Name)}, &secret); err != nil {
		b.Fatal(err)
	}
	stands := newStandIn(b, 0, ns, ca, standInSettings(b))
	stand := stands.wb
	stand.Generation = wb.Generation
	firstStatus(stand)
	got, want := wb.Status.DeepCopy(), stand.Status.DeepCopy()
	for _, st := range []*tetherv1.WorkerBindingStatus{got, want} {
		for i := range st.Conditions {
			st.Conditions[i].LastTransitionTime = metav1.Time{}
		}
	}
	var diffs []string
	if !equality.Semantic.DeepEqual(got, want) {
		diffs = append(diffs, fmt.Sprintf("first status: the control plane wrote %+v, the benchmark %+v", *got, *want))
	}
	if !equality.Semantic.DeepEqual(wb.Spec.Settings, stand.Spec.Settings) || wb.Spec.TokenSecretName != stand.Spec.TokenSecretName || wb.Spec.PreviousToken != nil {
		diffs = append(diffs, fmt.Sprintf("spec: the control plane wrote %+v, the benchmark %+v", wb.Spec, stand.Spec))
	}
	if len(wb.Spec.JobID) != len(stand.Spec.JobID) || len(wb.Spec.WorkerID) != len(stand.Spec.WorkerID) {
		diffs = append(diffs, fmt.Sprintf("ids %q and %q: the benchmark's are %q and %q", wb.Spec.JobID, wb.Spec.WorkerID, stand.Spec.JobID, stand.Spec.WorkerID))
	}
	if want := stands.secret.Data; len(secret.Data[names.CABundleKey]) != len(want[names.CABundleKey]) || len(secret.Data) != len(want) {
		diffs = append(diffs, fmt.Sprintf("token Secret: %d keys, a CA bundle of %d bytes; the benchmark's: %d keys, %d bytes",
			len(secret.Data), len(secret.Data[names.CABundleKey]), len(want), len(want[names.CABundleKey])))
	}
	if len(diffs) > 0 {
		b.Fatalf("the benchmark's stand-in binding writes are not what the control plane writes (update bindingWrites):\n%s", strings.Join(diffs, "\n"))
	}
}

// doAll runs write(i) for i in [0, n) from clients goroutines; an error
// fails the run.
func doAll(b *testing.B, n, clients int, write func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || firstErr.Load() != nil {
					return
				}
				if err := write(i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		b.Fatal(*err)
	}
}

// reportBindingWrites reports each kind of write's API-server CPU in plain
// objects of the floor, and all of them against the floor: what a
// binding's own writes cost against plain objects of their sizes, whatever
// controller makes them. It returns their sum, the unit of
// bind-x-binding-writes-apiserver-cpu.
func reportBindingWrites(b *testing.B, writes []bindingWrite, floorCPU cpuUse, n int) time.Duration {
	b.Helper()
	perFloorObject := floorCPU.children.Seconds() / float64(2*n)
	var sum time.Duration
	for _, w := range writes {
		sum += w.cpu.children
		x := w.cpu.children.Seconds() / float64(n) / perFloorObject
		fmt.Fprintf(os.Stderr, "controller-bench: binding writes, %s: %d in %s (CPU: %s), %.2f floor objects each\n", w.name, n, w.took.Round(time.Millisecond), w.cpu, x)
		b.ReportMetric(x, w.name+"-x-floor-object-apiserver-cpu")
	}
	b.ReportMetric(sum.Seconds()/floorCPU.children.Seconds(), "binding-writes-x-floor-apiserver-cpu")
	return sum
}

// tokenWritesTook is how long the benchmark's own clients took to create
// the token Secrets and then the WorkerBindings (what a job's pods wait
// for, bind-2000-s), one kind after the other, each until its watch saw
// the last: the bind's time with no controller in it.
func tokenWritesTook(writes []bindingWrite) time.Duration {
	var took time.Duration
	for _, w := range writes {
		if w.name == "token-secret" || w.name == "workerbinding" {
			took += w.took
		}
	}
	return took
}
