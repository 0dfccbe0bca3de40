package statuspatch

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// patchOf returns the JSON merge patch For builds from before to after.
func patchOf(t *testing.T, before, after *tetherv1.WorkerBinding) map[string]any {
	t.Helper()
	data, err := For(before, after).Data(after)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPatchCarriesConditionsOnlyWithALock(t *testing.T) {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", ResourceVersion: "42", Generation: 2},
		Status: tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning, Reason: tetherv1.ReasonHeartbeating, Message: "worker is heartbeating"}}
	lifecycle.SetOutcomeConditions(&wb.Status, wb.Generation)

	// Conditions already in line: the patch is the one field, unlocked.
	after := wb.DeepCopy()
	after.Status.LastSeq = 7
	p := patchOf(t, wb, after)
	status, _ := p["status"].(map[string]any)
	if _, locked := p["metadata"]; locked || len(status) != 1 || status["lastSeq"] == nil {
		t.Errorf("patch %v, want only status.lastSeq", p)
	}

	// A binding written before the conditions existed: the patch adds them,
	// locked to the version it was computed from.
	old := wb.DeepCopy()
	old.Status.Conditions = nil
	after = old.DeepCopy()
	after.Status.LastSeq = 7
	p = patchOf(t, old, after)
	meta, _ := p["metadata"].(map[string]any)
	status, _ = p["status"].(map[string]any)
	if meta["resourceVersion"] != "42" || status["conditions"] == nil {
		t.Errorf("patch %v, want the conditions with resourceVersion 42", p)
	}
	if len(after.Status.Conditions) != len(tetherv1.OutcomeConditionTypes()) {
		t.Errorf("after has %d conditions, want the outcome conditions", len(after.Status.Conditions))
	}
}
