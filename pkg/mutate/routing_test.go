package mutate

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// jobSet is a JobSet as Trainer creates it: an initializer and the trainer
// replicated job "node"; labels on the JobSet, suspend, and the trainer pod
// template's metadata as given (YAML, "" for none).
func jobSet(t *testing.T, labels string, suspend bool, nodeTemplateMeta string) []byte {
	t.Helper()
	meta := ""
	if nodeTemplateMeta != "" {
		meta = "\n          metadata: " + nodeTemplateMeta
	}
	doc := `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: tj
  namespace: ml
  labels: ` + labels + `
spec:
  suspend: ` + map[bool]string{true: "true", false: "false"}[suspend] + `
  replicatedJobs:
  - name: model-initializer
    template:
      spec:
        template:
          spec: {containers: [{name: model-initializer, image: init}]}
  - name: node
    template:
      spec:
        template:` + meta + `
          spec: {containers: [{name: node, image: train}]}
`
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// nodeTemplateLabels returns the labels of the trainer pod template and of
// the initializer's, after the JobSet webhook's patch.
func admitJobSet(t *testing.T, obj, old []byte) (node, initializer map[string]any) {
	t.Helper()
	req := admissionv1.AdmissionRequest{UID: "js", Operation: admissionv1.Create, Name: "tj", Namespace: "ml", Object: runtime.RawExtension{Raw: obj}}
	if old != nil {
		req.Operation, req.OldObject = admissionv1.Update, runtime.RawExtension{Raw: old}
	}
	resp := admit(t, &JobSetHandler{}, req)
	if !resp.Allowed {
		t.Fatalf("JobSet denied: %v", resp.Result)
	}
	out := applyPatch(t, obj, resp)
	var js map[string]any
	if err := json.Unmarshal(out, &js); err != nil {
		t.Fatal(err)
	}
	rjs := dig(js, "spec", "replicatedJobs").([]any)
	labels := func(i int) map[string]any {
		l, _ := dig(rjs[i], "template", "spec", "template", "metadata", "labels").(map[string]any)
		return l
	}
	// Re-invocation on the output changes nothing more.
	req.Object = runtime.RawExtension{Raw: out}
	if again := admit(t, &JobSetHandler{}, req); len(again.Patches) != 0 {
		t.Errorf("JobSet webhook is not idempotent: %v", again.Patches)
	}
	return labels(1), labels(0)
}

func TestJobSetRouting(t *testing.T) {
	const bound, unbound = `{tether.dev/bind: "true"}`, `{team: nlp}`
	for _, tc := range []struct {
		name      string
		obj, old  []byte
		wantRoute bool
	}{
		{name: "create bound, no template metadata", obj: jobSet(t, bound, false, ""), wantRoute: true},
		{name: "create bound, template metadata without labels", obj: jobSet(t, bound, false, "{annotations: {a: b}}"), wantRoute: true},
		{name: "create bound, template labels", obj: jobSet(t, bound, true, "{labels: {x: z}}"), wantRoute: true},
		{name: "create unbound", obj: jobSet(t, unbound, false, "")},
		// The second line of defence behind refusing conflicting runtime
		// patches: whatever a runtime (or a patch, or a v2.1
		// podTemplateOverride) put on the trainer pod template, a routed
		// JobSet's trainer pods carry the label.
		{name: "create bound, template label false", obj: jobSet(t, bound, false, `{labels: {tether.dev/bind: "false"}}`), wantRoute: true},
		{name: "update running, apply set the label false", obj: jobSet(t, bound, false, `{labels: {tether.dev/bind: "false"}}`),
			old: jobSet(t, bound, false, `{labels: {tether.dev/bind: "true"}}`), wantRoute: true},
		// Trainer's server-side apply drops the label the webhook added at
		// CREATE: put back, even while running (no net template change).
		{name: "update running, apply dropped the label", obj: jobSet(t, bound, false, ""),
			old: jobSet(t, bound, false, `{labels: {tether.dev/bind: "true"}}`), wantRoute: true},
		{name: "update running, unbound since, apply dropped the label", obj: jobSet(t, unbound, false, ""),
			old: jobSet(t, bound, false, `{labels: {tether.dev/bind: "true"}}`), wantRoute: true},
		// JobSet refuses pod template changes of a running JobSet.
		{name: "update running, newly labeled", obj: jobSet(t, bound, false, ""), old: jobSet(t, unbound, false, "")},
		{name: "update suspended, newly labeled", obj: jobSet(t, bound, true, ""), old: jobSet(t, unbound, true, ""), wantRoute: true},
		{name: "update being unsuspended, newly labeled", obj: jobSet(t, bound, false, ""), old: jobSet(t, unbound, true, ""), wantRoute: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node, initializer := admitJobSet(t, tc.obj, tc.old)
			if got := node[RouteLabel] == RouteValue; got != tc.wantRoute {
				t.Errorf("trainer pod template labels %v: routed %v, want %v", node, got, tc.wantRoute)
			}
			if _, ok := initializer[RouteLabel]; ok {
				t.Errorf("initializer pod template got %s: only trainer pods are routed", RouteLabel)
			}
			if strings.Contains(tc.name, "template labels") && node["x"] != "z" {
				t.Errorf("existing template label lost: %v", node)
			}
		})
	}
}

func routing(t *testing.T, doc string) *trainJobRouting {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var r trainJobRouting
	if err := json.Unmarshal(j, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestTrainJobRoutingUpdates covers the UPDATE rules the golden cases do not:
// when Trainer v2.2+ lets runtimePatches change, and unbinding.
func TestTrainJobRoutingUpdates(t *testing.T) {
	const (
		running   = "spec: {suspend: false}"
		suspended = "spec: {suspend: true}"
		routedRun = `spec: {suspend: false, runtimePatches: [{manager: kueue.x-k8s.io/manager}, {manager: tether.dev/bind, trainingRuntimeSpec: {template: {metadata: {labels: {tether.dev/bind: "true"}}}}}]}`
		routedSus = `spec: {suspend: true, runtimePatches: [{manager: kueue.x-k8s.io/manager}, {manager: tether.dev/bind, trainingRuntimeSpec: {template: {metadata: {labels: {tether.dev/bind: "true"}}}}}]}`
		editedSus = `spec: {suspend: true, runtimePatches: [{manager: tether.dev/bind, trainingRuntimeSpec: {template: {metadata: {labels: {other: x}}}}}]}`
		labels20  = `spec: {labels: {team: nlp, tether.dev/bind: "true"}}`
	)
	for _, tc := range []struct {
		name       string
		shape      TrainerShape
		obj, old   string
		bound      bool
		wantOps    string // the operations, "op path" joined by "; "
		wantWarned bool
	}{
		{name: "bound while running: Trainer would refuse the change", shape: ShapeRuntimePatches, obj: running, old: running, bound: true, wantWarned: true},
		// Kueue admitting (v2.2.0 refuses a change unless suspended after) or
		// preempting (the JobSet may still be active): not Tether's update to fail.
		{name: "unsuspended in this update", shape: ShapeRuntimePatches, obj: running, old: suspended, bound: true, wantWarned: true},
		{name: "suspended in this update", shape: ShapeRuntimePatches, obj: suspended, old: running, bound: true, wantWarned: true},
		{name: "bound while suspended", shape: ShapeRuntimePatches, obj: suspended, old: suspended, bound: true, wantOps: "add /spec/runtimePatches"},
		{name: "entry edited, suspended: put back", shape: ShapeRuntimePatches, obj: editedSus, old: editedSus, bound: true, wantOps: "replace /spec/runtimePatches/0"},
		{name: "routed, running", shape: ShapeRuntimePatches, obj: routedRun, old: routedRun, bound: true},
		{name: "unbound while suspended: entry removed", shape: ShapeRuntimePatches, obj: routedSus, old: routedSus, wantOps: "remove /spec/runtimePatches/1"},
		{name: "unbound while running: entry kept", shape: ShapeRuntimePatches, obj: routedRun, old: routedRun},
		{name: "v2.0 unbound: spec label removed", shape: ShapeSpecLabels, obj: labels20, old: labels20, wantOps: "remove /spec/labels/tether.dev~1bind"},
		{name: "v2.0 bound while running", shape: ShapeSpecLabels, obj: running, old: running, bound: true, wantOps: "add /spec/labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ops, warnings, err := routeTrainJob(tc.shape, routing(t, tc.obj), routing(t, tc.old), tc.bound)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, op := range ops {
				got = append(got, op.Operation+" "+op.Path)
			}
			if strings.Join(got, "; ") != tc.wantOps {
				t.Errorf("operations %q, want %q", got, tc.wantOps)
			}
			if (len(warnings) > 0) != tc.wantWarned {
				t.Errorf("warnings %q, want warned=%v", warnings, tc.wantWarned)
			}
		})
	}
}

// TestTrainJobRoutingConflictStored: a conflicting patch the stored object
// already had (before the check existed) does not block its other updates;
// a conflict an UPDATE brings is refused.
func TestTrainJobRoutingConflictStored(t *testing.T) {
	const conflict = `spec: {suspend: true, runtimePatches: [{manager: other.example/x, trainingRuntimeSpec: {template: {metadata: {labels: {tether.dev/bind: "false"}}}}}]}`
	if _, _, err := routeTrainJob(ShapeRuntimePatches, routing(t, conflict), routing(t, conflict), true); err != nil {
		t.Errorf("stored conflict refused again: %v", err)
	}
	_, _, err := routeTrainJob(ShapeRuntimePatches, routing(t, conflict), routing(t, "spec: {suspend: true}"), true)
	if err == nil || !strings.Contains(err.Error(), `runtime patch 0 (manager "other.example/x")`) {
		t.Errorf("conflict added by an UPDATE: error %v, want one naming the patch", err)
	}
	if _, _, err := routeTrainJob(ShapeRuntimePatches, routing(t, conflict), nil, false); err != nil {
		t.Errorf("unbound TrainJob refused: %v", err)
	}
}

func TestShapeOfCRD(t *testing.T) {
	crd := func(props string) map[string]any {
		var m map[string]any
		j, _ := yaml.YAMLToJSON([]byte(`spec: {versions: [{name: v1alpha1, schema: {openAPIV3Schema: {properties: {spec: {properties: ` + props + `}}}}}]}`))
		if err := json.Unmarshal(j, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for props, want := range map[string]TrainerShape{
		"{runtimePatches: {}, suspend: {}}":      ShapeRuntimePatches,
		"{labels: {}, podSpecOverrides: {}}":     ShapeSpecLabels,
		"{labels: {}, podTemplateOverrides: {}}": ShapeSpecLabels,
		"{suspend: {}}":                          "",
	} {
		u := unstructuredOf(crd(props))
		got, err := ShapeOfCRD(u)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%s: shape %q, error %v; want %q", props, got, err, want)
		}
	}
}

func unstructuredOf(m map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: m}
}
