package mutate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
)

// statusPath is the one path the pod webhook may replace: a stale status annotation.
const statusPath = "/metadata/annotations/tether.dev~1status"

// additivePath is where the pod webhook's patch may add: what Inject appends.
var additivePath = regexp.MustCompile(`^(/spec/initContainers(/-)?|/spec/volumes(/-)?|/spec/containers/[0-9]+/volumeMounts(/-)?|/metadata/annotations(/[^/]+)?)$`)

// checkAdditivePatch asserts that a pod patch only adds, and only where Inject appends.
func checkAdditivePatch(t *testing.T, patch []byte) {
	t.Helper()
	checkInjectionPatch(t, patch, -1)
}

// checkInjectionPatch is checkAdditivePatch for a pod whose init container
// declared (-1: none) declares the sidecar: the patch may also change that
// container, field by field, but never its resources.
func checkInjectionPatch(t *testing.T, patch []byte, declared int) {
	t.Helper()
	completion := fmt.Sprintf("/spec/initContainers/%d/", declared)
	var ops []struct {
		Op   string `json:"op"`
		Path string `json:"path"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("undecodable patch %s: %v", patch, err)
	}
	for _, op := range ops {
		if op.Op == "replace" && op.Path == statusPath {
			continue
		}
		if declared >= 0 && strings.HasPrefix(op.Path, completion) {
			if strings.HasPrefix(op.Path, completion+"resources") || op.Path == completion+"name" || op.Path == completion+"restartPolicy" {
				t.Errorf("patch operation %s %s: completing the declared sidecar must keep its name, restartPolicy and resources", op.Op, op.Path)
			}
			continue
		}
		if op.Op != "add" || !additivePath.MatchString(op.Path) {
			t.Errorf("patch operation %s %s: the pod webhook must only add what it injects", op.Op, op.Path)
		}
	}
}

// TestPodPatchKeepsUnknownFields: fields our k8s.io/api version does not know
// (a newer API server's) come out of the webhook as they went in, wherever
// they are: the patch only adds what the injector adds.
func TestPodPatchKeepsUnknownFields(t *testing.T) {
	for _, name := range []string{
		"injected-default",                 // no init containers, no volumes, no mounts: arrays created
		"artifact-parent-and-nested-mount", // volumes and mounts appended to
		"other-native-sidecar",             // init containers appended to
		"declared-sidecar",                 // the declaration completed in place
	} {
		t.Run(name, func(t *testing.T) {
			var pod map[string]any
			if err := json.Unmarshal(readJSON(t, "testdata/pod/"+name+".in.yaml"), &pod); err != nil {
				t.Fatal(err)
			}
			unknown := addUnknownFields(pod)
			raw := mustJSON(t, pod)

			h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: readTrainJob(t, "testdata/pod/"+name+".trainjob.yaml")}
			resp, d := admitPod(t, h, raw)
			if d.Reason != ReasonInjected {
				t.Fatalf("decision %s/%s, want %s", d.Outcome, d.Reason, ReasonInjected)
			}
			checkInjectionPatch(t, resp.Patch, declaredIndex(t, raw))
			if bytes.Contains(resp.Patch, []byte("future")) {
				t.Errorf("the patch mentions an unknown field: %s", resp.Patch)
			}

			var out map[string]any
			if err := json.Unmarshal(applyPatch(t, raw, resp), &out); err != nil {
				t.Fatal(err)
			}
			for _, path := range unknown {
				if got := lookup(out, path); got != "kept" {
					t.Errorf("unknown field %v is %v after the patch, want it kept", path, got)
				}
			}
			// Without the unknown fields, the result is the case's golden.
			stripUnknownFields(out)
			want, err := os.ReadFile("testdata/pod/" + name + ".golden.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if got := toYAML(t, mustJSON(t, out)); !bytes.Equal(got, want) {
				t.Errorf("besides the unknown fields, the result differs from the golden:\n%s", unifiedDiff("golden", "result", want, got))
			}
		})
	}
}

// TestPodPatchNullAndEmpty: the API server may send an absent, null or empty
// array or map where Inject adds the first element; the patch applies to each.
func TestPodPatchNullAndEmpty(t *testing.T) {
	var pod map[string]any
	if err := json.Unmarshal(readJSON(t, "testdata/pod/injected-default.in.yaml"), &pod); err != nil {
		t.Fatal(err)
	}
	md, spec := pod["metadata"].(map[string]any), pod["spec"].(map[string]any)
	md["annotations"] = nil // the completion index is also a label
	spec["initContainers"] = []any{}
	spec["volumes"] = nil
	spec["containers"].([]any)[0].(map[string]any)["volumeMounts"] = []any{}
	raw := mustJSON(t, pod)

	h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: readTrainJob(t, "testdata/pod/injected-default.trainjob.yaml")}
	resp, d := admitPod(t, h, raw)
	if d.Reason != ReasonInjected {
		t.Fatalf("decision %s/%s, want %s", d.Outcome, d.Reason, ReasonInjected)
	}
	checkAdditivePatch(t, resp.Patch)
	var got corev1.Pod
	if err := json.Unmarshal(applyPatch(t, raw, resp), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.InitContainers) != 1 || len(got.Spec.Volumes) != 3 || len(got.Spec.Containers[0].VolumeMounts) != 1 ||
		len(got.Annotations) != 1 || got.Annotations[names.PodStatusAnnotation] == "" {
		t.Errorf("patched pod lacks the injection: initContainers %d, volumes %d, trainer mounts %d, annotations %v",
			len(got.Spec.InitContainers), len(got.Spec.Volumes), len(got.Spec.Containers[0].VolumeMounts), got.Annotations)
	}
}

// TestInjectionPatchRefusesOtherChanges: the patch carries only additions, so
// a change Inject might one day make elsewhere must fail loudly, not be lost.
func TestInjectionPatchRefusesOtherChanges(t *testing.T) {
	before := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "node", Image: "trainer:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes: []corev1.Volume{{Name: "data"}},
	}}
	appended := func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: SidecarName})
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: TokenVolumeName})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: ArtifactVolumeName})
		p.Annotations = map[string]string{names.PodStatusAnnotation: "{}"}
	}
	after := before.DeepCopy()
	appended(after)
	ops, err := injectionPatch(mustSnapshot(t, before), after)
	if err != nil {
		t.Fatalf("additions refused: %v", err)
	}
	var paths []string
	for _, op := range ops {
		paths = append(paths, op.Operation+" "+op.Path)
	}
	want := "add /spec/initContainers, add /spec/volumes/-, add /spec/containers/0/volumeMounts/-, add /metadata/annotations"
	if got := strings.Join(paths, ", "); got != want {
		t.Errorf("operations %s, want %s", got, want)
	}

	for name, change := range map[string]func(*corev1.Pod){
		"container changed":   func(p *corev1.Pod) { p.Spec.Containers[0].Image = "trainer:2" },
		"mount changed":       func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].ReadOnly = true },
		"volume removed":      func(p *corev1.Pod) { p.Spec.Volumes = p.Spec.Volumes[1:] },
		"container added":     func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "x"}) },
		"annotation changed":  func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "2"} },
		"label added":         func(p *corev1.Pod) { p.Labels = map[string]string{"a": "1"} },
		"other field changed": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"annotation removed":  func(p *corev1.Pod) { delete(p.Annotations, "a") },
	} {
		t.Run(name, func(t *testing.T) {
			b := before.DeepCopy()
			b.Annotations = map[string]string{"a": "1"}
			a := b.DeepCopy()
			appended(a)
			a.Annotations["a"] = "1"
			change(a)
			if ops, err := injectionPatch(mustSnapshot(t, b), a); err == nil {
				t.Errorf("injectionPatch accepted the change: %v", ops)
			}
		})
	}
}

func mustSnapshot(t *testing.T, pod *corev1.Pod) podSnapshot {
	t.Helper()
	s, err := snapshotPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// addUnknownFields puts a field corev1.Pod does not know into the pod's
// metadata and spec and into every container, volume and volume mount, and
// returns their paths.
func addUnknownFields(pod map[string]any) [][]any {
	var paths [][]any
	add := func(obj map[string]any, path ...any) {
		obj["futureField"] = "kept"
		paths = append(paths, append(path, "futureField"))
	}
	add(pod["metadata"].(map[string]any), "metadata")
	spec := pod["spec"].(map[string]any)
	add(spec, "spec")
	for _, list := range []string{"containers", "initContainers", "volumes"} {
		items, _ := spec[list].([]any)
		for k, item := range items {
			add(item.(map[string]any), "spec", list, k)
			mounts, _ := item.(map[string]any)["volumeMounts"].([]any)
			for m, mount := range mounts {
				add(mount.(map[string]any), "spec", list, k, "volumeMounts", m)
			}
		}
	}
	return paths
}

func stripUnknownFields(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "futureField")
		for _, e := range v {
			stripUnknownFields(e)
		}
	case []any:
		for _, e := range v {
			stripUnknownFields(e)
		}
	}
}

// lookup follows path (map keys and slice indexes) in v.
func lookup(v any, path []any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[p]
		case int:
			s, ok := v.([]any)
			if !ok || p >= len(s) {
				return nil
			}
			v = s[p]
		default:
			panic(fmt.Sprintf("path element %v", p))
		}
	}
	return v
}

// A TrainJob the cache does not have yet (its pod came right after it) is
// read from the API server: the bound pod is injected, not let through.
func TestPodHandlerReadsATrainJobTheCacheLacks(t *testing.T) {
	raw := readJSON(t, "testdata/pod/injected-default.in.yaml")
	live := readTrainJob(t, "testdata/pod/injected-default.trainjob.yaml")
	for _, tc := range []struct {
		name string
		live client.Reader
		want Reason
	}{
		{"cache miss, found live", live, ReasonInjected},
		{"cache miss, no live reader", nil, SkipNoTrainJob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &PodHandler{Injector: PodInjector{Sidecar: testSidecar}, TrainJobs: oneTrainJob{}, Live: tc.live}
			if _, d := admitPod(t, h, raw); d.Reason != tc.want {
				t.Fatalf("decision %s/%s, want %s", d.Outcome, d.Reason, tc.want)
			}
		})
	}
}

// declaredIndex is the index of the init container declaring the sidecar in
// the pod (JSON), or -1.
func declaredIndex(t *testing.T, pod []byte) int {
	t.Helper()
	var p corev1.Pod
	if err := json.Unmarshal(pod, &p); err != nil {
		t.Fatal(err)
	}
	return declaredSidecar(&p)
}
