package bindingserver

import (
	"context"
	"strings"
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

// registerOn registers node 0 through the binding server's status write, on
// a binding whose status is status, and returns the Events it recorded and
// the phase written.
func registerOn(t *testing.T, status tetherv1.WorkerBindingStatus) ([]string, tetherv1.WorkerBindingPhase) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := tetherv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "team"},
		Spec: tetherv1.WorkerBindingSpec{TrainJobName: "job", JobID: "job-1", WorkerID: "w-1"}, Status: status}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(wb).WithStatusSubresource(wb).Build()
	rec := events.NewFakeRecorder(10)
	s := New(Options{}, c, c, c, logr.Discard(), rec)
	pod := lifecycle.Pod{Rank: 0, Name: "job-node-0-0", UID: "pod-uid", NodeName: "node-a"}
	updated, err := s.updateStatus(context.Background(), types.NamespacedName{Namespace: "team", Name: "job"}, func(st *tetherv1.WorkerBindingStatus) bool {
		changed, _ := lifecycle.PodSeen(st, pod, true, time.Now())
		return changed
	})
	if err != nil {
		t.Fatal(err)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	return got, updated.Status.Phase
}

func TestRegisteringBeforeTheFirstStatusAnnouncesTheTokenFirst(t *testing.T) {
	// The controller writes the token Secret, then the binding's first
	// status; a sidecar quick enough registers in between.
	got, phase := registerOn(t, tetherv1.WorkerBindingStatus{})
	if phase != tetherv1.PhaseRegistered {
		t.Fatalf("phase %q after registering, want Registered", phase)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "Normal "+tetherv1.ReasonTokenIssued+" ") || !strings.HasPrefix(got[1], "Normal Registered ") {
		t.Fatalf("Events %q, want TokenIssued, then Registered", got)
	}
}

func TestRegisteringAfterTheFirstStatusAnnouncesOnlyTheRegistration(t *testing.T) {
	var st tetherv1.WorkerBindingStatus
	lifecycle.Initial(&st) // written by the controller, which announced it
	got, phase := registerOn(t, st)
	if phase != tetherv1.PhaseRegistered || len(got) != 1 || !strings.HasPrefix(got[0], "Normal Registered ") {
		t.Fatalf("phase %q, Events %q; want Registered and its Event alone", phase, got)
	}
}
