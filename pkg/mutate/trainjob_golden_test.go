package mutate

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// sequentialIDs returns a TrainJobMutator.NewID that hands out
// 00000000-0000-4000-8000-000000000001, ...0002, ... (valid v4 UUID shapes).
func sequentialIDs() func() string {
	n := 0
	return func() string {
		n++
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
	}
}

// TestTrainJobWebhookGolden runs testdata/trainjob through TrainJobHandler.
// TrainJobs of every Trainer version are plain YAML here: the webhook decodes
// metadata and the few spec fields routing reads, and this test asserts that
// it changes nothing but the identity annotations and Tether's routing label
// (spec.labels on Trainer v2.0/v2.1, cases trainer-v2.0-* and trainer-v2.1-*;
// its spec.runtimePatches entry on v2.2+, every other case).
func TestTrainJobWebhookGolden(t *testing.T) {
	dir := goldenDir{dir: "testdata/trainjob", optional: []string{".old.yaml"}}
	for _, name := range dir.cases(t) {
		t.Run(name, func(t *testing.T) {
			in := readJSON(t, dir.path(name, inSuffix))
			old := readOptionalJSON(t, dir.path(name, ".old.yaml"))
			shape := ShapeRuntimePatches
			if strings.HasPrefix(name, "trainer-v2.0-") || strings.HasPrefix(name, "trainer-v2.1-") {
				shape = ShapeSpecLabels
			}
			h := &TrainJobHandler{Mutator: TrainJobMutator{NewID: sequentialIDs(), NamespaceUID: goldenNamespaceUID}, Shapes: FixedShape(shape)}

			resp := admit(t, h, trainJobRequest(t, in, old))
			if !resp.Allowed {
				dir.check(t, name, deniedWith(resp.Result.Message))
				return
			}
			out := applyPatch(t, in, resp)
			checkOnlyIdentityAdded(t, in, out)
			dir.check(t, name, admitted(toYAML(t, out)))

			// Re-invocation (reinvocationPolicy IfNeeded) and any later
			// UPDATE that keeps the object: nothing more to add.
			checkIdempotent(t, admit(t, h, trainJobRequest(t, out, old)))
		})
	}
}

// trainJobRequest is the admission request for a TrainJob: CREATE of object,
// or UPDATE from old when old is not nil.
func trainJobRequest(t *testing.T, object, old []byte) admissionv1.AdmissionRequest {
	t.Helper()
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(object, &meta); err != nil {
		t.Fatal(err)
	}
	req := admissionv1.AdmissionRequest{
		UID:       types.UID("trainjob-request"),
		Kind:      metav1.GroupVersionKind(trainjob.GVK),
		Resource:  metav1.GroupVersionResource{Group: trainjob.GVK.Group, Version: trainjob.GVK.Version, Resource: "trainjobs"},
		Name:      meta.Name,
		Namespace: meta.Namespace,
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: object},
	}
	if old != nil {
		req.Operation = admissionv1.Update
		req.OldObject = runtime.RawExtension{Raw: old}
	}
	return req
}

// checkOnlyIdentityAdded asserts that out is in plus, at most, the identity
// annotations and the routing label (withoutRouting): every Trainer version's
// spec, and every other label and annotation, comes out as it went in.
func checkOnlyIdentityAdded(t *testing.T, in, out []byte) {
	t.Helper()
	var before, after map[string]any
	if err := json.Unmarshal(in, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	annotations := func(obj map[string]any) map[string]any {
		md, _ := obj["metadata"].(map[string]any)
		a, _ := md["annotations"].(map[string]any)
		if md != nil {
			delete(md, "annotations")
		}
		return a
	}
	beforeAnn, afterAnn := annotations(before), annotations(after)
	withoutRouting(before)
	withoutRouting(after)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the webhook changed more than metadata.annotations:\n%s",
			unifiedDiff("input", "output", toYAML(t, mustJSON(t, before)), toYAML(t, mustJSON(t, after))))
	}
	for k, v := range beforeAnn {
		if afterAnn[k] != v {
			t.Errorf("annotation %s changed from %v to %v", k, v, afterAnn[k])
		}
	}
	for k := range afterAnn {
		if _, had := beforeAnn[k]; !had && k != names.JobIDAnnotation && k != names.WorkerIDAnnotation {
			t.Errorf("the webhook added annotation %s, which is not an identity annotation", k)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withoutRouting removes from a TrainJob what routing may add or remove: the
// route label in spec.labels and Tether's spec.runtimePatches entry (and the
// field, once empty).
func withoutRouting(obj map[string]any) {
	spec, _ := obj["spec"].(map[string]any)
	if labels, ok := spec["labels"].(map[string]any); ok {
		delete(labels, RouteLabel)
		if len(labels) == 0 {
			delete(spec, "labels")
		}
	}
	if patches, ok := spec["runtimePatches"].([]any); ok {
		kept := []any{}
		for _, p := range patches {
			if m, _ := p.(map[string]any); m["manager"] != names.RuntimePatchManager {
				kept = append(kept, p)
			}
		}
		spec["runtimePatches"] = kept
		if len(kept) == 0 {
			delete(spec, "runtimePatches")
		}
	}
}

// goldenNamespaceUID is every namespace's UID in the golden cases: scoped
// job ids carry its tag, 29847ca0 (binding.NamespaceTag).
func goldenNamespaceUID(context.Context, string) (string, error) {
	return "6f1d5c1f-3a11-4a57-9d63-0d6f3e52b7c4", nil
}
