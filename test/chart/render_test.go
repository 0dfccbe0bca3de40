package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// KubeVersion is what `helm template` assumes for the chart's kubeVersion
// constraint (without a cluster it would assume v1.20).
const kubeVersion = "1.37.2"

// tool returns a binary hack/testbin.sh built, or skips the test with how to build it.
func tool(t *testing.T, name string) string {
	t.Helper()
	assets, err := testenv.Assets()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(assets, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not built: run `make testbin` (hack/testbin.sh %s): %v", name, name, err)
	}
	return p
}

func chartDir() string { return filepath.Join(testenv.RepoRoot(), "charts", "tether") }

// run runs a command and returns its stdout, failing with its stderr.
func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", filepath.Base(name), args, err, stderr.Bytes(), out)
	}
	return out
}

// helmTemplate renders the chart with --set values (CRDs included) as an
// install into tether-system would.
func helmTemplate(t *testing.T, set ...string) []byte {
	t.Helper()
	args := []string{"template", "tether", chartDir(), "--namespace", "tether-system", "--kube-version", kubeVersion, "--include-crds"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return run(t, tool(t, "helm"), args...)
}

// kustomize renders a kustomization directory with kubectl's kustomize.
func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	return run(t, tool(t, "kubectl"), "kustomize", dir)
}

// parse splits a multi-document YAML stream into objects keyed by
// apiVersion/kind/namespace/name; a key seen twice is an error.
func parse(t *testing.T, what string, b []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		k := key(u)
		if _, dup := objs[k]; dup {
			t.Fatalf("%s renders %s twice", what, k)
		}
		objs[k] = u
	}
}

func key(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s/%s %s/%s", u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName())
}
