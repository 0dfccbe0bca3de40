package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
)

// TestEncodePatchIsJSONMarshal: encodePatch writes what json.Marshal writes
// for the same operations (JsonPatchOperation.MarshalJSON), byte for byte,
// for every golden pod case's patch and for the operations no case makes.
func TestEncodePatchIsJSONMarshal(t *testing.T) {
	check := func(t *testing.T, ops []jsonpatch.JsonPatchOperation, appended *sidecarInput) {
		t.Helper()
		want, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodePatch(ops, appended)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("encodePatch wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	}
	t.Run("edge cases", func(t *testing.T) {
		check(t, []jsonpatch.JsonPatchOperation{
			{Operation: "add", Path: "/metadata/annotations/a~1b", Value: nil},
			{Operation: "replace", Path: "/spec/x", Value: nil},
			{Operation: "remove", Path: "/spec/initContainers/0/args"},
			{Operation: "add", Path: "/metadata/annotations/html", Value: "<a href=\"x\">&amp;</a>\u2028"},
			{Operation: "add", Path: "/spec/volumes", Value: []corev1.Volume{{Name: "v"}}},
			{Operation: "add", Path: "/metadata/annotations", Value: map[string]string{"b": "2", "a": "1"}},
		}, nil)
		check(t, nil, nil)
		check(t, []jsonpatch.JsonPatchOperation{}, nil)
	})

	dir := goldenDir{dir: "testdata/pod", optional: []string{".trainjob.yaml"}}
	patched := 0
	for _, name := range dir.cases(t) {
		var pod corev1.Pod
		if err := json.Unmarshal(readJSON(t, dir.path(name, inSuffix)), &pod); err != nil {
			t.Fatal(err)
		}
		h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: readTrainJob(t, dir.path(name, ".trainjob.yaml"))}
		tj, d := h.lookup(context.Background(), &pod)
		if d != nil {
			continue
		}
		before, err := snapshotPod(&pod)
		if err != nil {
			t.Fatal(err)
		}
		decision, appended := h.Injector.inject(&pod, tj)
		if decision.Outcome != OutcomePatched {
			continue
		}
		ops, err := injectionPatch(before, &pod)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Run(name, func(t *testing.T) { check(t, ops, appended) })
		patched++
	}
	if patched == 0 {
		t.Fatal("no golden pod case was patched")
	}
}
