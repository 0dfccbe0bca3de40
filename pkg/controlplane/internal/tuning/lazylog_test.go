package tuning

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// A line of a LazyValues logger says what it says with zap alone: its name,
// every value given before it (also across WithName), its own, the error.
func TestLazyValuesWritesWhatZapWrites(t *testing.T) {
	var buf bytes.Buffer
	base := zap.New(zap.WriteTo(&buf), zap.UseDevMode(false))
	l := LazyValues(base).WithName("controller").WithValues("controller", "workerbinding", "namespace", "ns").
		WithName("reconciler").WithValues("reconcileID", "r-1")
	l.Info("bound", "job", "j-1")
	l.Error(errors.New("boom"), "failed", "attempt", 2)
	l.V(1).Info("not written")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []map[string]any{
		{"logger": "controller.reconciler", "msg": "bound", "controller": "workerbinding", "namespace": "ns", "reconcileID": "r-1", "job": "j-1"},
		{"logger": "controller.reconciler", "msg": "failed", "controller": "workerbinding", "namespace": "ns", "reconcileID": "r-1", "attempt": 2.0, "error": "boom"},
	} {
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%s)", i, k, got[k], v, lines[i])
			}
		}
	}
	// Values given to one child are not another's.
	buf.Reset()
	parent := LazyValues(base).WithValues("a", 1)
	_ = parent.WithValues("b", 2)
	parent.WithValues("c", 3).Info("x")
	if strings.Contains(buf.String(), `"b"`) {
		t.Errorf("a sibling's value leaked: %s", buf.String())
	}
}
