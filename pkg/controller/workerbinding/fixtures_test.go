package workerbinding

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// Fixtures of the reconciler's tests: pods, TrainJob conditions and the
// binding server's writes at seconds of a history (the phase machine's own
// table is lifecycle's derive_test.go).

var h0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// at is a time in a history: seconds after h0.
func at(s int) time.Time { return h0.Add(time.Duration(s) * time.Second) }

// pod is a trainer pod of job "tj", rank and uid given, injected, created at 1 s.
func pod(rank int, uid string) *testobj.PodWrapper {
	return testobj.MakeTrainerPod("tj", "ns").CompletionIndex(fmt.Sprint(rank)).UID(uid).Created(at(1)).
		RestartPolicy(corev1.RestartPolicyOnFailure).Injected()
}

// register is the registration and first heartbeat of node 0's sidecar,
// in pod "a".
func register(st *tetherv1.WorkerBindingStatus, now time.Time) {
	lifecycle.PodSeen(st, lifecycle.Pod{Name: "a", UID: "a"}, true, now)
	lifecycle.Heartbeat(st, 0, "a", now, 1, nil)
}

func manifest(rank int, verified bool) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, _ time.Time) {
		a := tetherv1.NodeArtifacts{Manifest: upload.ManifestKey("job", rank), Verified: verified, Files: 2, Bytes: 10}
		if !verified {
			a.Missing, a.MissingCount, a.LastError = []string{"ckpt/shard.pt"}, 1, "1 of 2 files missing or different"
		}
		uid := ""
		if n := lifecycle.Node(st, int32(rank)); n != nil {
			uid = n.PodUID
		}
		lifecycle.ArtifactsRecorded(st, int32(rank), uid, a)
	}
}

func cond(typ string, status metav1.ConditionStatus, t int, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(at(t)), Reason: typ, Message: msg}
}

var (
	admitted = []metav1.Condition{cond(trainjob.ConditionSuspended, metav1.ConditionFalse, 0, "")}
	complete = func(t int) []metav1.Condition {
		return append(admitted, cond(trainjob.ConditionComplete, metav1.ConditionTrue, t, "jobset completed"))
	}
)

func trainJob(conds []metav1.Condition) *unstructured.Unstructured {
	tj := trainjob.New()
	tj.SetName("tj")
	tj.SetNamespace("ns")
	raw := make([]any, 0, len(conds))
	for _, c := range conds {
		raw = append(raw, map[string]any{"type": c.Type, "status": string(c.Status), "reason": c.Reason, "message": c.Message,
			"lastTransitionTime": c.LastTransitionTime.UTC().Format(time.RFC3339)})
	}
	_ = unstructured.SetNestedSlice(tj.Object, raw, "status", "conditions")
	return tj
}

// jobSetReader answers the controller's one read of the TrainJob's JobSet
// with a JobSet of nodes trainer nodes, as Trainer's runtimes shape it: one
// indexed Job with that many completions.
type jobSetReader struct{ nodes int }

func (r jobSetReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GroupVersionKind() != trainjob.JobSetGVK {
		return errors.New("jobSetReader reads JobSets only")
	}
	if r.nodes == 0 {
		return apierrors.NewNotFound(schema.GroupResource{Group: "jobset.x-k8s.io", Resource: "jobsets"}, key.Name)
	}
	u.SetName(key.Name)
	return unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "node", "replicas": int64(1),
		"template": map[string]any{"spec": map[string]any{"completions": int64(r.nodes), "parallelism": int64(r.nodes)}}}}, "spec", "replicatedJobs")
}

func (jobSetReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("jobSetReader lists nothing")
}

// decideRequeue is decide as the tests drive it: when to look again.
func (r *Reconciler) decideRequeue(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, pods []corev1.Pod, now time.Time) time.Duration {
	_, requeue := r.decide(ctx, tj, wb, pods, now)
	return requeue
}
