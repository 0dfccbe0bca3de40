package trainerstatus

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func TestValueETAFromStepRate(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	// 50 steps in 100 s since the attempt's first sample at step 25, half
	// done at step 75: 150 steps in all, 75 to go at 0.5 steps/s = 150 s.
	p := &tetherv1.Progress{Step: ptr.To[int64](75), Fraction: "0.5", Epoch: "1.5", Loss: "0.25"}
	got := Value(p, 25, t0, t0.Add(100*time.Second))
	want := map[string]any{
		"progressPercentage": int64(50), "estimatedRemainingSeconds": int64(150),
		"metrics": []any{
			map[string]any{"name": "step", "value": "75"},
			map[string]any{"name": "epoch", "value": "1.5"},
			map[string]any{"name": "loss", "value": "0.25"},
		},
		"lastUpdatedTime": "2026-12-01T12:01:40Z",
	}
	if a, b := mustJSON(t, got), mustJSON(t, want); a != b {
		t.Errorf("Value = %s\nwant %s", a, b)
	}
}

func TestValueWithoutRateOrTotal(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		p    *tetherv1.Progress
		// present and absent keys of the result
		has, lacks []string
	}{
		{"first sample: no rate yet", &tetherv1.Progress{Step: ptr.To[int64](10), Fraction: "0.1"}, []string{"progressPercentage"}, []string{"estimatedRemainingSeconds"}},
		{"no total: no percentage, no ETA", &tetherv1.Progress{Step: ptr.To[int64](10)}, []string{"metrics"}, []string{"progressPercentage", "estimatedRemainingSeconds"}},
		{"fraction out of range is ignored", &tetherv1.Progress{Step: ptr.To[int64](10), Fraction: "1.5"}, []string{"metrics"}, []string{"progressPercentage"}},
	}
	for _, c := range cases {
		got := Value(c.p, 10, t0, t0)
		for _, k := range c.has {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: no %s in %v", c.name, k, got)
			}
		}
		for _, k := range c.lacks {
			if _, ok := got[k]; ok {
				t.Errorf("%s: %s in %v", c.name, k, got)
			}
		}
	}
	if got := Value(&tetherv1.Progress{}, -1, t0, t0); got != nil {
		t.Errorf("empty progress gave %v, want nil (nothing to write)", got)
	}
}

func TestProgressFromNativeTrainerStatus(t *testing.T) {
	// What transformers' Kubeflow callback reports through Trainer's status server.
	ts := map[string]any{"progressPercentage": int64(42), "estimatedRemainingSeconds": int64(300),
		"metrics":         []any{map[string]any{"name": "loss", "value": "0.731"}, map[string]any{"name": "step", "value": "420"}, map[string]any{"name": "eval_accuracy", "value": "0.9"}},
		"lastUpdatedTime": "2026-12-01T12:00:00Z"}
	p := ProgressFromTrainerStatus(ts)
	want := tetherv1.Progress{Step: ptr.To[int64](420), Fraction: "0.42", Loss: "0.731",
		UpdatedTime: ptr.To(metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)))}
	if a, b := mustJSON(t, p), mustJSON(t, want); a != b {
		t.Errorf("ProgressFromTrainerStatus = %s, want %s", a, b)
	}
	if p := ProgressFromTrainerStatus(map[string]any{"lastUpdatedTime": "2026-12-01T12:00:00Z"}); p != nil {
		t.Errorf("a trainerStatus without progress gave %+v, want nil", p)
	}
}

func TestOwnedByOther(t *testing.T) {
	tj := &unstructured.Unstructured{Object: map[string]any{}}
	status := metav1.NewFieldsV1(`{"f:status":{"f:trainerStatus":{"f:progressPercentage":{}}}}`)
	tj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: FieldManager, Subresource: "status", FieldsV1: status},
		{Manager: "trainer", FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{}}}`)}})
	if ownedByOther(tj) {
		t.Error("Tether's own trainerStatus counted as a native report")
	}
	tj.SetManagedFields(append(tj.GetManagedFields(), metav1.ManagedFieldsEntry{Manager: "trainer-status-server", Subresource: "status", FieldsV1: status}))
	if !ownedByOther(tj) {
		t.Error("a trainerStatus of another field manager not seen as native")
	}
}

// The TrainJob CRDs of the Trainer releases the local cluster runs: v2.3.0
// has status.trainerStatus, v2.0.0 does not.
func TestCRDHasTrainerStatus(t *testing.T) {
	for version, want := range map[string]bool{"v2.3.0": true, "v2.0.0": false} {
		out, err := exec.Command("go", "mod", "download", "-json", "github.com/kubeflow/trainer/v2@"+version).Output()
		if err != nil {
			t.Fatalf("go mod download trainer %s: %v", version, err)
		}
		var m struct{ Dir string }
		if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
			t.Fatalf("go mod download trainer %s: no Dir in %s", version, out)
		}
		b, err := os.ReadFile(filepath.Join(m.Dir, "manifests", "base", "crds", "trainer.kubeflow.org_trainjobs.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crd := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &crd.Object); err != nil {
			t.Fatal(err)
		}
		if got := CRDHasTrainerStatus(crd); got != want {
			t.Errorf("Trainer %s: CRDHasTrainerStatus = %v, want %v", version, got, want)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
