package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// bindingWith is a binding in phase/reason with the given conditions.
func bindingWith(name string, phase tetherv1.WorkerBindingPhase, reason string, conds ...metav1.Condition) *tetherv1.WorkerBinding {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Status: tetherv1.WorkerBindingStatus{Phase: phase, Reason: reason, Message: "m"}}
	for _, c := range conds {
		meta.SetStatusCondition(&wb.Status.Conditions, c)
	}
	return wb
}

func cond(typ string, s metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: "R"}
}

// What a first read decides: met, or final and not met (an outcome
// condition never changes then). The watch path runs against a real API
// server in test/integration/binding.
func TestWaitConditionOnTheFirstRead(t *testing.T) {
	c := &Client{kube: fake.NewClientBuilder().WithScheme(Scheme()).WithObjects(
		bindingWith("running", tetherv1.PhaseRunning, tetherv1.ReasonHeartbeating, cond(tetherv1.ConditionReady, metav1.ConditionTrue)),
		bindingWith("failed", tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed,
			cond(tetherv1.ConditionSucceeded, metav1.ConditionFalse), cond(tetherv1.ConditionFailed, metav1.ConditionTrue)),
		bindingWith("old", tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded),
	).Build()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name, typ, want string
		wantErr         string
	}{
		{"running", tetherv1.ConditionReady, "True", ""},
		{"running", tetherv1.ConditionReady, "true", ""},
		{"failed", tetherv1.ConditionFailed, "True", ""},
		{"failed", tetherv1.ConditionSucceeded, "False", ""},
		{"failed", tetherv1.ConditionSucceeded, "True", "with condition Succeeded=False, which can no longer become True"},
		{"old", tetherv1.ConditionSucceeded, "True", "predates the outcome conditions"},
	} {
		wb, err := c.WaitCondition(ctx, "ns", tc.name, tc.typ, tc.want)
		var ce *ConditionError
		switch {
		case tc.wantErr == "" && (err != nil || wb == nil || wb.Name != tc.name):
			t.Errorf("%s %s=%s: %v", tc.name, tc.typ, tc.want, err)
		case tc.wantErr != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s %s=%s: %v, want a *ConditionError with %q", tc.name, tc.typ, tc.want, err, tc.wantErr)
		}
	}
}
