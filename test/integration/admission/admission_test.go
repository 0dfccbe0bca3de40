package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/testobj"
)

var nsCounter int

// newNamespace creates a fresh namespace with the given labels.
func newNamespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	nsCounter++
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("%s-%d", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), nsCounter), Labels: labels}}
	if len(ns.Name) > 63 {
		ns.Name = ns.Name[len(ns.Name)-63:]
		ns.Name = strings.TrimLeft(ns.Name, "-")
	}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	// The API server of this environment runs no ServiceAccount controller:
	// pods need the default ServiceAccount to exist.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
	if err := env.Client.Create(context.Background(), sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return ns.Name
}

func get[T client.Object](t *testing.T, obj T, ns, name string) (T, error) {
	t.Helper()
	err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
	return obj, err
}

func TestLabeledTrainJobIsStampedAndBound(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("llama", ns).Bound().Queue("team-a").Suspend(true).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	jobID, workerID := tj.Annotations[names.JobIDAnnotation], tj.Annotations[names.WorkerIDAnnotation]
	if jobID == "" || workerID == "" {
		t.Fatalf("TrainJob not stamped: annotations %v", tj.Annotations)
	}

	var wb *tetherv1.WorkerBinding
	eventually(t, func() error {
		var err error
		wb, err = get(t, &tetherv1.WorkerBinding{}, ns, "llama")
		if err != nil {
			return err
		}
		if wb.Status.Phase != tetherv1.PhasePending {
			return fmt.Errorf("phase %q, want Pending", wb.Status.Phase)
		}
		return nil
	})
	secret, err := get(t, &corev1.Secret{}, ns, binding.TokenSecretName("llama"))
	if err != nil {
		t.Fatal(err)
	}

	for _, o := range []client.Object{wb, secret} {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != tj.UID || refs[0].Kind != "TrainJob" || refs[0].Controller == nil || !*refs[0].Controller {
			t.Errorf("%T ownerReferences = %+v, want the TrainJob (uid %s) as controller", o, refs, tj.UID)
		}
	}
	if wb.Spec.JobID != jobID || wb.Spec.WorkerID != workerID || wb.Spec.TrainJobName != "llama" {
		t.Errorf("WorkerBinding spec %+v does not match the TrainJob's identity %s/%s", wb.Spec, jobID, workerID)
	}
	token := secret.Data["token"]
	if len(token) != 64 {
		t.Fatalf("token is %d characters, want 64 hex (256 bits)", len(token))
	}
	sum := sha256.Sum256(token)
	if wb.Spec.TokenSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("WorkerBinding tokenSHA256 %s is not the SHA-256 of the Secret's token", wb.Spec.TokenSHA256)
	}
	if strings.Contains(fmt.Sprintf("%+v", wb), string(token)) {
		t.Error("the WorkerBinding contains the token itself")
	}
	ca, err := os.ReadFile(env.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["ca.crt"]) != string(ca) {
		t.Error("token Secret ca.crt is not the binding server's CA bundle")
	}
	if c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionTokenIssued); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("TokenIssued condition = %+v, want True", c)
	}
	waitForEvent(t, ns, "llama", "Bound")

	// The identity is fixed for the job's life.
	tj.Annotations[names.JobIDAnnotation] = "another-id"
	err = env.Client.Update(ctx, tj)
	if err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing the job id: err = %v, want a denial saying it is immutable", err)
	}
}

func TestInvalidAnnotationIsDeniedWithExample(t *testing.T) {
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("bad", ns).Bound().Annotation(names.HeartbeatIntervalAnnotation, "soon").Obj()
	err := env.Client.Create(context.Background(), tj)
	if err == nil {
		t.Fatal("TrainJob with an invalid heartbeat interval was admitted")
	}
	for _, want := range []string{names.HeartbeatIntervalAnnotation, `"soon"`, "example"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("denial %q does not mention %s", err, want)
		}
	}
}

func TestDryRunCreatePersistsNothing(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("dry", ns).Bound().Obj()
	if err := env.Client.Create(ctx, tj, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if tj.Annotations[names.JobIDAnnotation] == "" {
		t.Error("dry-run response was not stamped: the webhook did not run")
	}
	consistently(t, 2*time.Second, func() error {
		if _, err := get(t, &trainer.TrainJob{}, ns, "dry"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("TrainJob after dry run: err = %v, want NotFound", err)
		}
		if _, err := get(t, &corev1.Secret{}, ns, binding.TokenSecretName("dry")); !apierrors.IsNotFound(err) {
			return fmt.Errorf("token Secret after dry run: err = %v, want NotFound", err)
		}
		if _, err := get(t, &tetherv1.WorkerBinding{}, ns, "dry"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("WorkerBinding after dry run: err = %v, want NotFound", err)
		}
		return nil
	})
}

func TestUnlabeledTrainJobIsUntouched(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("plain", ns).Annotation("team", "a").Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	if len(tj.Annotations) != 1 {
		t.Errorf("annotations = %v, want only the user's", tj.Annotations)
	}
	pod := testobj.MakeTrainerPod("plain", ns).Obj()
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) != 0 || pod.Annotations[names.PodStatusAnnotation] != "" {
		t.Errorf("pod of an unlabeled TrainJob was mutated: %v", pod.Spec.InitContainers)
	}
	consistently(t, 2*time.Second, func() error {
		if _, err := get(t, &corev1.Secret{}, ns, binding.TokenSecretName("plain")); !apierrors.IsNotFound(err) {
			return fmt.Errorf("token Secret for an unlabeled job: err = %v", err)
		}
		if _, err := get(t, &tetherv1.WorkerBinding{}, ns, "plain"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("WorkerBinding for an unlabeled job: err = %v", err)
		}
		return nil
	})
}

func TestLabelingAnExistingTrainJobBindsIt(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("later", ns).Suspend(true).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	tj.Labels = map[string]string{names.BindLabel: names.BindValue}
	if err := env.Client.Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	if tj.Annotations[names.JobIDAnnotation] == "" {
		t.Fatalf("UPDATE adding the label did not stamp the job: %v", tj.Annotations)
	}
	// Trainer v2.3's CRD (read by the webhook under the shipped RBAC) has
	// spec.runtimePatches: Tether's entry labels the JobSet, which routes the
	// job's pods to the pod webhook. Allowed here because the job is suspended.
	if n := len(tj.Spec.RuntimePatches); n != 1 || tj.Spec.RuntimePatches[0].Manager != names.RuntimePatchManager ||
		tj.Spec.RuntimePatches[0].TrainingRuntimeSpec == nil || tj.Spec.RuntimePatches[0].TrainingRuntimeSpec.Template.Metadata.Labels[mutate.RouteLabel] != "true" {
		t.Fatalf("runtimePatches after binding = %+v, want Tether's entry labeling the JobSet %s=true", tj.Spec.RuntimePatches, mutate.RouteLabel)
	}
	eventually(t, func() error {
		_, err := get(t, &tetherv1.WorkerBinding{}, ns, "later")
		return err
	})
}

func TestPodInRestrictedNamespaceGetsSidecar(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
	tj := testobj.MakeTrainJob("secure", ns).Bound().Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}

	// Pod Security admission is enforcing here: a non-compliant pod is
	// refused, after Tether's webhook patched it. That pod never existed, so
	// Tether must not announce it as injected (only the compliant one below).
	loose := testobj.MakeTrainerPod("secure", ns).Routed().Obj()
	loose.Spec.Containers[0].SecurityContext = nil
	if err := env.Client.Create(ctx, loose); err == nil || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("non-compliant pod: err = %v, want a Pod Security restricted violation", err)
	}

	pod := testobj.MakeTrainerPod("secure", ns).Routed().RestrictedPodSecurity().Obj()
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatalf("trainer pod of a bound job in a restricted namespace: %v", err)
	}
	if len(pod.Spec.InitContainers) != 1 || pod.Spec.InitContainers[0].Name != mutate.SidecarName {
		t.Fatalf("init containers = %v, want the Tether sidecar", pod.Spec.InitContainers)
	}
	sc := pod.Spec.InitContainers[0]
	if sc.RestartPolicy == nil || *sc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("sidecar is not a native sidecar (restartPolicy Always)")
	}
	if pod.Annotations[names.PodStatusAnnotation] == "" {
		t.Error("pod has no tether.dev/status annotation")
	}
	// The token Secret volume is the job's own.
	var found bool
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == binding.TokenSecretName("secure") {
			found = true
		}
	}
	if !found {
		t.Errorf("pod volumes %v lack the job's token Secret", pod.Spec.Volumes)
	}
	waitForEvent(t, ns, "secure", string(mutate.ReasonInjected))
	consistently(t, 2*time.Second, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var injected []string
		for _, e := range list.Items {
			if e.Regarding.Name == "secure" && e.Reason == string(mutate.ReasonInjected) {
				injected = append(injected, e.Note)
			}
		}
		if len(injected) != 1 || !strings.Contains(injected[0], pod.Name) {
			return fmt.Errorf("Injected Events %q, want one, naming %s (the refused pod was never created)", injected, pod.Name)
		}
		return nil
	})
}

func TestPodsCreatedBeforeBindingAreReported(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("early", ns).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	pod := testobj.MakeTrainerPod("early", ns).Name("early-node-0-0-abcde").Obj()
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	tj.Labels = map[string]string{names.BindLabel: names.BindValue}
	if err := env.Client.Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		wb, err := get(t, &tetherv1.WorkerBinding{}, ns, "early")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionPodsInjected)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, pod.Name) {
			return fmt.Errorf("PodsInjected condition = %+v, want False naming %s", c, pod.Name)
		}
		return nil
	})
	waitForEvent(t, ns, "early", tetherv1.ReasonPodsNotInjected)
}

// TestEveryUninjectedPodIsWarned: a pod recreated without the sidecar after
// the first one was reported gets its own PodsNotInjected Warning, where
// only the first pod's used to be sent.
func TestEveryUninjectedPodIsWarned(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("again", ns).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	first := testobj.MakeTrainerPod("again", ns).Name("again-node-0-0-aaaaa").Obj()
	if err := env.Client.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	tj.Labels = map[string]string{names.BindLabel: names.BindValue}
	if err := env.Client.Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	waitForEventNote(t, ns, "again", tetherv1.ReasonPodsNotInjected, first.Name)
	// The Job replaces a failed pod; it is not routed either (created as
	// before the binding), so it too runs without the sidecar.
	first.Status.Phase = corev1.PodFailed
	if err := env.Client.Status().Update(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := testobj.MakeTrainerPod("again", ns).Name("again-node-0-0-bbbbb").Obj()
	if err := env.Client.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitForEventNote(t, ns, "again", tetherv1.ReasonPodsNotInjected, second.Name)
}

func TestMultiNodeBindsEveryNode(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	for _, tc := range []struct {
		name      string
		scope     string
		wantRanks []string // TETHER_NODE_RANK of the pods that get the sidecar
	}{
		{"all", "", []string{"0", "1"}},
		{"primary", jobconfig.NodesPrimary, []string{"0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := testobj.MakeTrainJob("multi-"+tc.name, ns).Bound().NumNodes(2)
			if tc.scope != "" {
				w = w.Annotation(names.NodesAnnotation, tc.scope)
			}
			if err := env.Client.Create(ctx, w.Obj()); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, idx := range []string{"0", "1"} {
				p := testobj.MakeTrainerPod("multi-"+tc.name, ns).Routed().CompletionIndex(idx).Obj()
				if err := env.Client.Create(ctx, p); err != nil {
					t.Fatal(err)
				}
				for _, c := range p.Spec.InitContainers {
					for _, e := range c.Env {
						if e.Name == names.EnvNodeRank {
							got = append(got, e.Value)
						}
					}
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.wantRanks, ",") {
				t.Errorf("sidecars with node ranks %v, want %v", got, tc.wantRanks)
			}
		})
	}
}

// waitForEvent waits for an Event with reason on the TrainJob.
// waitForEventNote waits for an Event reason on the TrainJob whose note contains substr.
func waitForEventNote(t *testing.T, ns, trainJob, reason, substr string) {
	t.Helper()
	eventually(t, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "TrainJob" && e.Regarding.Name == trainJob && e.Reason == reason {
				if strings.Contains(e.Note, substr) {
					return nil
				}
				seen = append(seen, e.Note)
			}
		}
		return fmt.Errorf("no %s Event on TrainJob %s naming %s (seen %q)", reason, trainJob, substr, seen)
	})
}

func waitForEvent(t *testing.T, ns, trainJob, reason string) {
	t.Helper()
	eventually(t, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "TrainJob" && e.Regarding.Name == trainJob {
				if e.Reason == reason {
					return nil
				}
				seen = append(seen, e.Reason)
			}
		}
		return fmt.Errorf("no %s Event on TrainJob %s (seen %v)", reason, trainJob, seen)
	})
}

// TestPodsNotInjectedRemedy: the remedy the PodsNotInjected message names,
// as far as the API server shows it (Trainer's and JobSet's controllers do
// not run here). A TrainJob bound while running cannot get Tether's
// runtime patch (Trainer v2.2+ lets runtimePatches change only while the job
// stays suspended), and neither does a plain suspend and resume; suspend,
// update while suspended, resume does, and keeps it.
func TestPodsNotInjectedRemedy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, nil)
	tj := testobj.MakeTrainJob("late", ns).Suspend(false).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	routed := func() bool {
		for _, p := range tj.Spec.RuntimePatches {
			if p.Manager == names.RuntimePatchManager {
				return true
			}
		}
		return false
	}
	step := func(what string, change func(), wantRouted bool) {
		t.Helper()
		change()
		if err := env.Client.Update(ctx, tj); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if routed() != wantRouted {
			t.Fatalf("%s: Tether's runtime patch present %v, want %v (runtimePatches %+v)", what, routed(), wantRouted, tj.Spec.RuntimePatches)
		}
	}
	step("bind while running", func() { tj.Labels = map[string]string{names.BindLabel: names.BindValue} }, false)
	step("suspend", func() { tj.Spec.Suspend = ptr.To(true) }, false)
	step("resume without an update in between", func() { tj.Spec.Suspend = ptr.To(false) }, false)
	step("suspend again", func() { tj.Spec.Suspend = ptr.To(true) }, false)
	step("update while suspended (the message's kubectl annotate)", func() {
		tj.Annotations["tether.dev/routed"] = "1"
	}, true)
	step("resume", func() { tj.Spec.Suspend = ptr.To(false) }, true)
}
