package mutate

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/pkg/mutate/internal/codec"
)

// The codec encodes this webhook's patches on its fast path; these tests
// prove that what it writes for them, the sidecar this webhook renders
// included, is what json.Marshal writes.

// patchOf is the codec's patch of ops, with the sidecar appended from in.
func patchOf(t testing.TB, ops []jsonpatch.JsonPatchOperation, in *sidecarInput) []byte {
	t.Helper()
	var sidecar *codec.Container
	if c, ok := in.container(); ok {
		sidecar = &c
	}
	resp, err := codec.Patched(ops, sidecar)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) == 0 {
		return nil
	}
	return resp.Patch
}

// TestGoldenPatchesAreJSONMarshal: for every golden pod case the injector
// patches, the codec's patch is json.Marshal of the operations, byte for
// byte, and the cases append the sidecar both as the whole init container
// list and after the pod's own.
func TestGoldenPatchesAreJSONMarshal(t *testing.T) {
	paths := map[string]bool{}
	patched := 0
	forEachGoldenPatch(t, func(name string, ops []jsonpatch.JsonPatchOperation, appended *sidecarInput) {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			if got := patchOf(t, ops, appended); !bytes.Equal(got, want) {
				t.Errorf("the codec wrote\n%s\njson.Marshal writes\n%s", got, want)
			}
		})
		for _, op := range ops {
			if appended != nil && strings.HasPrefix(op.Path, "/spec/initContainers") {
				paths[op.Path] = true
			}
		}
		patched++
	})
	if patched == 0 {
		t.Fatal("no golden pod case was patched")
	}
	for _, path := range []string{"/spec/initContainers", "/spec/initContainers/-"} {
		if !paths[path] {
			t.Errorf("no golden case appends the sidecar with an operation on %s", path)
		}
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
			before.release()
			continue
		}
		ops, err := injectionPatch(before, &pod)
		before.release()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fn(name, ops, appended)
	}
}

// TestGoldenSidecarsUseTemplates: every golden case's appended sidecar is
// encoded from a template, not by the json.Marshal fallback: renderSidecar
// stays a function of the strings and resources the codec fills in.
func TestGoldenSidecarsUseTemplates(t *testing.T) {
	n := 0
	forEachGoldenPatch(t, func(name string, _ []jsonpatch.JsonPatchOperation, appended *sidecarInput) {
		if appended == nil {
			return
		}
		n++
		c, ok := appended.container()
		if !ok {
			t.Errorf("%s: the sidecar is encoded with json.Marshal, not from a template", name)
			return
		}
		if ok, err := codec.Templated(&c); err != nil || !ok {
			t.Errorf("%s: the codec learnt no template of the sidecar (%v)", name, err)
		}
	})
	if n == 0 {
		t.Fatal("no golden case appends the sidecar")
	}
}

// TestUntemplatedSidecarsAreMarshaled: a sidecar input not of the form
// planArtifacts gives (a mount with subPathExpr or propagation) goes to the
// codec as no container, so json.Marshal encodes it.
func TestUntemplatedSidecarsAreMarshaled(t *testing.T) {
	in := &sidecarInput{image: "i", artifactMount: corev1.VolumeMount{Name: "a", SubPathExpr: "$(POD)"}}
	if _, ok := in.container(); ok {
		t.Error("a subPathExpr artifact mount is templated")
	}
	in = &sidecarInput{image: "i", nestedMounts: []corev1.VolumeMount{{Name: "p", MountPath: "/p", ReadOnly: true,
		MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)}}}
	if _, ok := in.container(); ok {
		t.Error("a nested mount with propagation is templated")
	}
}

// FuzzSidecarTemplate: whatever the strings, the codec's patch appending
// the sidecar is json.Marshal's.
func FuzzSidecarTemplate(f *testing.F) {
	f.Add("ghcr.io/tether-dev/tether-sidecar:v0.1.0", "llama-finetune", "checkpoints/**", "", "initializer", "sub/dir", "/var/run/tether/artifacts/x")
	f.Add("", "<&>", "\xff", "\u2028", "", "", "")
	f.Fuzz(func(t *testing.T, image, trainJob, include, exclude, volume, subPath, nested string) {
		in := sidecarInput{image: image, serverURL: "https://tether.tether-system.svc:8443", trainJob: trainJob, jobID: trainJob + "-id",
			workerID: "w", nodeRank: "3", heartbeat: "10s", flushBudget: "25s", include: include, exclude: exclude,
			artifactMount: corev1.VolumeMount{Name: volume, SubPath: subPath}, resources: DefaultSidecarResources()}
		if nested != "" {
			in.nestedMounts = []corev1.VolumeMount{{Name: volume, SubPath: subPath, MountPath: nested, ReadOnly: true}}
		}
		ops := []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/spec/initContainers/-", Value: renderSidecar(in)}}
		want, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		if got := patchOf(t, ops, &in); !bytes.Equal(got, want) {
			t.Fatalf("the codec wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	})
}
