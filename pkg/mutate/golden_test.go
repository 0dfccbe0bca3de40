package mutate

// Golden tests for both webhooks, in the style of Istio's injection tests.
//
// Every case is a file testdata/<webhook>/<case>.in.yaml: the object as the API
// server sends it to the webhook. The test runs it through the real admission
// handler, applies the returned JSON patch to the input and compares the result
// with one of:
//
//	<case>.golden.yaml  the admitted object, patch applied (sorted keys, as sigs.k8s.io/yaml writes it)
//	<case>.denied.txt   the exact denial message, followed by one newline
//
// Optional per-case inputs:
//
//	trainjob/<case>.old.yaml      present: the request is an UPDATE from this object; absent: CREATE
//	pod/<case>.trainjob.yaml      the TrainJob the pod belongs to; absent: no TrainJob exists
//
// Inputs are written with sorted keys too, so `diff <case>.in.yaml <case>.golden.yaml`
// shows exactly what the webhook changed.
//
// Regenerate the expected files after an intended change with
//
//	go test ./pkg/mutate -update
//
// and review the diff. -update also deletes expected files that no longer
// match a case (no .in.yaml, or the case's outcome changed between admitted and
// denied); without -update such files fail the test.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/pmezard/go-difflib/difflib"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ from the webhooks' current output (go test ./pkg/mutate -update)")

const (
	inSuffix     = ".in.yaml"
	goldenSuffix = ".golden.yaml"
	deniedSuffix = ".denied.txt"
)

// goldenDir is one webhook's directory of cases.
type goldenDir struct {
	dir string
	// optional lists the suffixes of optional per-case inputs in this directory.
	optional []string
}

func (g goldenDir) path(name, suffix string) string { return filepath.Join(g.dir, name+suffix) }

// cases returns the case names, sorted. Every file in the directory must
// belong to a case: an expected file without an input is stale (deleted under
// -update), an optional input without .in.yaml or any other file is an error.
func (g goldenDir) cases(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(g.dir)
	if err != nil {
		t.Fatal(err)
	}
	type file struct{ name, suffix string }
	var files []file
	inputs := map[string]bool{}
	for _, e := range entries {
		f, known := file{}, false
		for _, suffix := range append([]string{inSuffix, goldenSuffix, deniedSuffix}, g.optional...) {
			if name, ok := strings.CutSuffix(e.Name(), suffix); ok && name != "" && !e.IsDir() {
				f, known = file{name, suffix}, true
				break
			}
		}
		if !known {
			t.Errorf("%s: unexpected file; a case is <case>%s with <case>%s or <case>%s and optionally %s",
				filepath.Join(g.dir, e.Name()), inSuffix, goldenSuffix, deniedSuffix, strings.Join(g.optional, ", "))
			continue
		}
		if f.suffix == inSuffix {
			inputs[f.name] = true
		}
		files = append(files, f)
	}
	for _, f := range files {
		if inputs[f.name] {
			continue
		}
		p := g.path(f.name, f.suffix)
		switch {
		case f.suffix != goldenSuffix && f.suffix != deniedSuffix:
			t.Errorf("%s: no %s for this input; add one or delete the file", p, g.path(f.name, inSuffix))
		case *update:
			if err := os.Remove(p); err != nil {
				t.Error(err)
			}
			t.Logf("deleted stale %s", p)
		default:
			t.Errorf("%s is stale: there is no %s; run go test ./pkg/mutate -update to delete it", p, g.path(f.name, inSuffix))
		}
	}
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatalf("no cases (*%s) in %s", inSuffix, g.dir)
	}
	return names
}

// result is what a webhook did with a case's input.
type result struct {
	denied  bool
	message string // the denial message
	object  []byte // the admitted object, as YAML
}

func admitted(object []byte) result { return result{object: object} }
func deniedWith(msg string) result  { return result{denied: true, message: msg} }

// check compares r with the case's expected file, or writes it under -update.
func (g goldenDir) check(t *testing.T, name string, r result) {
	t.Helper()
	want, other, got := g.path(name, goldenSuffix), g.path(name, deniedSuffix), r.object
	if r.denied {
		want, other, got = other, want, []byte(r.message+"\n")
	}
	if *update {
		if old, err := os.ReadFile(want); err != nil || !bytes.Equal(old, got) {
			if err := os.WriteFile(want, got, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s", want)
		}
		if err := os.Remove(other); err == nil {
			t.Logf("deleted %s: the case's outcome changed", other)
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	if _, err := os.Stat(other); err == nil {
		outcome := "admitted the object"
		if r.denied {
			outcome = "denied it: " + r.message
		}
		t.Errorf("outcome changed: %s exists but the webhook now %s; run go test ./pkg/mutate -update if that is intended", other, outcome)
		return
	}
	wantBytes, err := os.ReadFile(want)
	if errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is missing; run go test ./pkg/mutate -update to create it. The webhook's result:\n%s", want, got)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wantBytes, got) {
		t.Errorf("webhook output differs from %s (run go test ./pkg/mutate -update if that is intended):\n%s", want, unifiedDiff(want, "webhook output", wantBytes, got))
	}
}

func unifiedDiff(fromName, toName string, from, to []byte) string {
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(from)), B: difflib.SplitLines(string(to)),
		FromFile: fromName, ToFile: toName, Context: 3,
	})
	if err != nil {
		return err.Error()
	}
	return d
}

// readJSON reads a YAML file as the JSON the API server would send; duplicate
// keys are an error.
func readJSON(t testing.TB, path string) []byte {
	t.Helper()
	y, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSONStrict(y)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return j
}

// readOptionalJSON is readJSON for an optional input; nil when the file is absent.
func readOptionalJSON(t testing.TB, path string) []byte {
	t.Helper()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return readJSON(t, path)
}

// toYAML renders JSON the way goldens are stored.
func toYAML(t *testing.T, j []byte) []byte {
	t.Helper()
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// admit runs one admission request through h and completes the response the
// way controller-runtime's webhook server does before it is sent: the JSON
// patch is then in resp.Patch. A response that is neither allowed nor a plain
// denial (an Errored response, e.g. undecodable input) fails the test.
func admit(t *testing.T, h admission.Handler, req admissionv1.AdmissionRequest) admission.Response {
	t.Helper()
	r := admission.Request{AdmissionRequest: req}
	resp := h.Handle(context.Background(), r)
	if err := resp.Complete(r); err != nil {
		t.Fatal(err)
	}
	if !resp.Allowed && resp.Result.Code != http.StatusForbidden {
		t.Fatalf("webhook errored instead of deciding (code %d): %s", resp.Result.Code, resp.Result.Message)
	}
	if !resp.Allowed && len(resp.Patch) != 0 {
		t.Errorf("denied response carries a patch: %s", resp.Patch)
	}
	return resp
}

// applyPatch applies an admitted response's JSON patch to the request object.
func applyPatch(t *testing.T, object []byte, resp admission.Response) []byte {
	t.Helper()
	if len(resp.Patch) == 0 {
		if resp.PatchType != nil {
			t.Errorf("patchType %s without a patch", *resp.PatchType)
		}
		return object
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch without patchType JSONPatch: %v", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("undecodable patch %s: %v", resp.Patch, err)
	}
	out, err := p.Apply(object)
	if err != nil {
		t.Fatalf("patch %s does not apply to the request object: %v", resp.Patch, err)
	}
	return out
}

// checkIdempotent asserts that a second admission of a webhook's own output
// is allowed and changes nothing.
func checkIdempotent(t *testing.T, resp admission.Response) {
	t.Helper()
	if !resp.Allowed {
		t.Errorf("not idempotent: the webhook denies its own output: %s", resp.Result.Message)
	}
	if len(resp.Patch) != 0 {
		t.Errorf("not idempotent: the webhook patches its own output again: %s", resp.Patch)
	}
}
