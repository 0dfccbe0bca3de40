package controller

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// A binding whose ids are not its TrainJob's annotations (the TrainJob
// webhook bypassed) is refused before anything is read or written: a
// Warning names both, and the reconcile stops.
func TestBindingWhoseIDsAreNotItsTrainJobsIsRefused(t *testing.T) {
	rec := events.NewFakeRecorder(4)
	r := &BindingReconciler{Events: rec}
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
