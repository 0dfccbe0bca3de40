package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
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

	patched := 0
	forEachGoldenPatch(t, func(name string, ops []jsonpatch.JsonPatchOperation, appended *sidecarInput) {
		t.Run(name, func(t *testing.T) { check(t, ops, appended) })
		patched++
	})
	if patched == 0 {
		t.Fatal("no golden pod case was patched")
	}
}

// forEachGoldenPatch calls fn with the patch operations and the appended
// sidecar of every golden pod case the injector patches.
func forEachGoldenPatch(t *testing.T, fn func(name string, ops []jsonpatch.JsonPatchOperation, appended *sidecarInput)) {
	t.Helper()
	dir := goldenDir{dir: "testdata/pod", optional: []string{".trainjob.yaml"}}
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
		fn(name, ops, appended)
	}
}

// TestPatchEncodesTheSidecarFromItsTemplate: the operation that appends the
// sidecar (the whole init container list of a pod that had none, or one
// added after the pod's own) is encoded from the sidecar's template, not by
// the json.Marshal fallback: a marked template shows in the patch.
func TestPatchEncodesTheSidecarFromItsTemplate(t *testing.T) {
	defer resetSidecarTemplates()
	paths := map[string]bool{}
	forEachGoldenPatch(t, func(name string, ops []jsonpatch.JsonPatchOperation, appended *sidecarInput) {
		if appended == nil {
			return
		}
		resetSidecarTemplates()
		if _, err := encodePatch(ops, appended); err != nil { // learns the template
			t.Fatal(err)
		}
		shape := appended.shape(appended.stringFields())
		sidecarTemplates.Lock()
		learned := sidecarTemplates.byShape[shape]
		if learned == nil {
			sidecarTemplates.Unlock()
			t.Fatalf("%s: no template learned", name)
		}
		marked := *learned
		marked.literals = slices.Clone(learned.literals)
		marked.literals[0] = append([]byte(`{"marked":true,`), learned.literals[0][1:]...)
		sidecarTemplates.byShape[shape] = &marked
		sidecarTemplates.Unlock()
		patch, err := encodePatch(ops, appended)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(patch, []byte(`{"marked":true,`)) {
			t.Errorf("%s: the sidecar was not encoded from its template: %s", name, patch)
		}
		for _, op := range ops {
			if strings.HasPrefix(op.Path, "/spec/initContainers") {
				paths[op.Path] = true
			}
		}
	})
	for _, path := range []string{"/spec/initContainers", "/spec/initContainers/-"} {
		if !paths[path] {
			t.Errorf("no golden case appends the sidecar with an operation on %s", path)
		}
	}
}
