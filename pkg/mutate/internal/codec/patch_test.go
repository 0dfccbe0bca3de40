package codec

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
)

// TestEncodePatchIsJSONMarshal: encodePatch writes what json.Marshal writes
// for the same operations (JsonPatchOperation.MarshalJSON), byte for byte:
// values of every kind, the appended container as one init container or as
// the whole list, and a container of the appended one's name elsewhere.
// (pkg/mutate's tests check every golden pod case's patch.)
func TestEncodePatchIsJSONMarshal(t *testing.T) {
	check := func(t *testing.T, ops []jsonpatch.JsonPatchOperation, appended *Container) {
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

	c := testContainer([]string{"img", "a", "", "<c>", "vol", "", "n", "s", "/var/run/artifacts/n"}, defaultResources)
	rendered := renderTest(c.Fields, c.Resources)
	other := rendered
	other.Name = "other"
	check(t, []jsonpatch.JsonPatchOperation{
		{Operation: "add", Path: "/spec/initContainers/-", Value: rendered},
		{Operation: "add", Path: "/spec/volumes/-", Value: corev1.Volume{Name: "v"}},
	}, c)
	check(t, []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/initContainers", Value: []corev1.Container{rendered}}}, c)
	check(t, []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/initContainers/-", Value: other}}, c)
	check(t, []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/initContainers", Value: []corev1.Container{other, rendered}}}, c)
}

// TestPatchEncodesTheSidecarFromItsTemplate: the operation that appends the
// container (the whole init container list of a pod that had none, or one
// added after the pod's own) is encoded from the container's template, not
// by the json.Marshal fallback: a marked template shows in the patch.
func TestPatchEncodesTheSidecarFromItsTemplate(t *testing.T) {
	defer resetTemplates()
	c := testContainer([]string{"img", "a", "b", "c", "vol", "sub"}, defaultResources)
	rendered := renderTest(c.Fields, c.Resources)
	for _, ops := range [][]jsonpatch.JsonPatchOperation{
		{{Operation: "add", Path: "/spec/initContainers/-", Value: rendered}},
		{{Operation: "add", Path: "/spec/initContainers", Value: []corev1.Container{rendered}}},
	} {
		resetTemplates()
		if _, err := encodePatch(ops, c); err != nil { // learns the template
			t.Fatal(err)
		}
		templates.Lock()
		learned := templates.byShape[c.shape()]
		if learned == nil {
			templates.Unlock()
			t.Fatalf("%s: no template learnt", ops[0].Path)
		}
		marked := *learned
		marked.literals = slices.Clone(learned.literals)
		marked.literals[0] = append([]byte(`{"marked":true,`), learned.literals[0][1:]...)
		templates.byShape[c.shape()] = &marked
		templates.Unlock()
		patch, err := encodePatch(ops, c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(patch, []byte(`{"marked":true,`)) {
			t.Errorf("%s: the container was not encoded from its template: %s", ops[0].Path, patch)
		}
	}
}
