package bindingserver

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// A binding this replica's cache has not seen is not a deleted binding.
// The soak (seed 20261206) found sidecars of three jobs that registered,
// then had their session closed at once as revoked ("binding deleted") by a
// replica whose watch lagged after a kube-apiserver restart; a revoked
// sidecar never reconnects, so one of those jobs ended without a manifest. The status write and the
// liveness check now ask the API server before taking a miss for a deletion.
func TestLaggingCacheIsNoDeletion(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := tetherv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "team"},
		Spec: tetherv1.WorkerBindingSpec{TrainJobName: "job", JobID: "job-1", WorkerID: "w-1"}}
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(wb).WithStatusSubresource(wb).Build()
	lagging := fake.NewClientBuilder().WithScheme(scheme).Build() // has not seen it
	s := New(Options{}, lagging, live, live, logr.Discard(), events.NewFakeRecorder(10))
	key := types.NamespacedName{Namespace: "team", Name: "job"}

	updated, err := s.updateStatus(context.Background(), key, func(st *tetherv1.WorkerBindingStatus) bool {
		changed, _ := lifecycle.PodSeen(st, lifecycle.Pod{Rank: 0, Name: "job-node-0-0", UID: "pod-uid"}, true, time.Now())
		return changed
	})
	if err != nil {
		t.Fatalf("registering with the binding missing from the cache: %v (taken for a deletion, its sessions would be revoked)", err)
	}
	if updated.Status.Phase != tetherv1.PhaseRegistered {
		t.Fatalf("phase %q, want Registered", updated.Status.Phase)
	}
	if s.goneLive(context.Background(), key) {
		t.Fatal("goneLive says a binding the API server holds is gone")
	}
	if !s.goneLive(context.Background(), types.NamespacedName{Namespace: "team", Name: "deleted"}) {
		t.Fatal("goneLive says a binding the API server does not hold is there")
	}
}
