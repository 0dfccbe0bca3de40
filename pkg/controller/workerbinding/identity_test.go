package workerbinding

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// A binding whose ids are not its TrainJob's annotations (the TrainJob
// webhook bypassed) is refused before anything is read or written: a
// Warning names both, and the reconcile stops.
func TestBindingWhoseIDsAreNotItsTrainJobsIsRefused(t *testing.T) {
	rec := events.NewFakeRecorder(4)
	r := &Reconciler{Events: rec}
	tj := &unstructured.Unstructured{Object: map[string]any{}}
	tj.SetGroupVersionKind(trainjob.GVK)
	tj.SetNamespace("team")
	tj.SetName("job")
	wb := &tetherv1.WorkerBinding{Spec: tetherv1.WorkerBindingSpec{JobID: "victim", WorkerID: "w"}}
	wb.Name = "job"
	res, refused, err := r.checkIdentity(context.Background(), tj, wb, "mine", "w")
	if err != nil || !refused || res.RequeueAfter != 0 {
		t.Fatalf("checkIdentity = %+v, %v, %v; want refused, no requeue", res, refused, err)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, tetherv1.ReasonIdentityMismatch) || !strings.Contains(e, `"victim"`) || !strings.Contains(e, `"mine"`) {
			t.Errorf("Event %q: want %s naming both ids", e, tetherv1.ReasonIdentityMismatch)
		}
	default:
		t.Error("no Event")
	}
}

// A job id scoped to another namespace (binding.JobIDScope) reaching the
// controller (the TrainJob webhook bypassed) is refused before anything is
// read or written: it has no claim that would refuse it.
func TestForeignScopedJobIDIsRefused(t *testing.T) {
	rec := events.NewFakeRecorder(4)
	r := &Reconciler{Events: rec, Claims: &jobidclaim.JobIDClaims{}} // nil clients: any read or write would panic
	tj := &unstructured.Unstructured{Object: map[string]any{}}
	tj.SetGroupVersionKind(trainjob.GVK)
	tj.SetNamespace("team")
	tj.SetName("job")
	res, refused, err := r.checkIdentity(context.Background(), tj, nil, "victim_0123456789abcdef", "w")
	if err != nil || !refused || res.RequeueAfter != 0 {
		t.Fatalf("checkIdentity = %+v, %v, %v; want refused, no requeue", res, refused, err)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, tetherv1.ReasonJobIDConflict) || !strings.Contains(e, `scoped to namespace "victim"`) {
			t.Errorf("Event %q: want %s saying the id is scoped to namespace victim", e, tetherv1.ReasonJobIDConflict)
		}
	default:
		t.Error("no Event")
	}
}

// trainJobsByKey answers Gets of TrainJob metadata from a map (the cache).
type trainJobsByKey map[types.NamespacedName]types.UID

func (m trainJobsByKey) Get(_ context.Context, key client.ObjectKey, o client.Object, _ ...client.GetOption) error {
	uid, ok := m[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: trainjob.GVK.Group, Resource: "trainjobs"}, key.Name)
	}
	o.SetUID(uid)
	return nil
}

func (trainJobsByKey) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

// A scoped id is reserved for the first TrainJob that binds it until that
// TrainJob is gone: another one of the namespace is told which holds it,
// and takes it once the holder is deleted or forgotten.
func TestScopedIDReservedOnce(t *testing.T) {
	ctx := context.Background()
	var s scopedIDHolders
	a := jobidclaim.Holder{Namespace: "team", Name: "a", UID: "uid-a"}
	b := jobidclaim.Holder{Namespace: "team", Name: "b", UID: "uid-b"}
	cache := trainJobsByKey{{Namespace: "team", Name: "a"}: "uid-a", {Namespace: "team", Name: "b"}: "uid-b"}
	const id = "team_0123456789abcdef"
	if other := s.reserve(ctx, cache, id, a); other != "" {
		t.Fatalf("first reservation refused: held by %s", other)
	}
	if other := s.reserve(ctx, cache, id, a); other != "" {
		t.Fatalf("the holder's own reconcile refused: held by %s", other)
	}
	if other := s.reserve(ctx, cache, id, b); other != "team/a" {
		t.Fatalf("second TrainJob: held by %q, want team/a", other)
	}
	// The holder deleted and recreated under its name (another UID): the
	// old reservation is not the new TrainJob's.
	cache[types.NamespacedName{Namespace: "team", Name: "a"}] = "uid-a2"
	if other := s.reserve(ctx, cache, id, b); other != "" {
		t.Fatalf("once the holder is gone: held by %q, want it taken", other)
	}
	s.forget(types.NamespacedName{Namespace: "team", Name: "a"}) // a's forget does not drop b's
	if other := s.reserve(ctx, cache, id, a); other != "team/b" {
		t.Fatalf("after forgetting a: held by %q, want team/b", other)
	}
	s.forget(types.NamespacedName{Namespace: "team", Name: "b"})
	if other := s.reserve(ctx, cache, id, a); other != "" {
		t.Fatalf("after forgetting b: held by %q, want it free", other)
	}
}
