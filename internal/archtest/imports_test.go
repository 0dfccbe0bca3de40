package archtest

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/tether-dev/tether/"

type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Module     *struct{ Path string }
}

// list runs `go list -deps -json` on patterns: each package's directory,
// non-test Go files and non-test imports.
func list(t *testing.T, patterns ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=ImportPath,Dir,GoFiles,Imports,Module"}, patterns...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %v: %v\n%s", patterns, err, ee.Stderr)
		}
		t.Fatalf("go list %v: %v", patterns, err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func internal(path string) bool { return strings.HasPrefix(path, module) }

func rel(path string) string { return strings.TrimPrefix(path, module) }

// Nothing the control plane's wiring builds on may import the webhooks:
// the controller and the binding server take Trainer facts from pkg/trainjob
// and protocol facts from pkg/binding.
func TestNothingBelowControlPlaneImportsMutate(t *testing.T) {
	for _, p := range list(t, "./pkg/controlplane") {
		if !internal(p.ImportPath) || rel(p.ImportPath) == "pkg/controlplane" {
			continue
		}
		for _, imp := range p.Imports {
			if rel(imp) == "pkg/mutate" {
				t.Errorf("%s imports pkg/mutate; only pkg/controlplane may", rel(p.ImportPath))
			}
		}
	}
}

// The control plane binary must not compile against the sidecar's code.
func TestControlPlaneHasNoSidecarCode(t *testing.T) {
	for _, p := range list(t, "./cmd/tether-control-plane") {
		if r := rel(p.ImportPath); internal(p.ImportPath) && (strings.HasPrefix(r, "pkg/sidecar/") || strings.HasPrefix(r, "cmd/sidecar")) {
			t.Errorf("cmd/tether-control-plane depends on sidecar-only package %s", r)
		}
	}
}

// The sidecar keeps a small dependency set: no Kubernetes client code, and
// none of the control plane's packages.
func TestSidecarHasNoKubernetesOrControlPlaneCode(t *testing.T) {
	for _, p := range list(t, "./cmd/sidecar") {
		r := rel(p.ImportPath)
		switch {
		case strings.HasPrefix(p.ImportPath, "k8s.io/"), strings.HasPrefix(p.ImportPath, "sigs.k8s.io/"):
			t.Errorf("cmd/sidecar depends on %s", p.ImportPath)
		case internal(p.ImportPath) && controlPlaneOnly(r):
			t.Errorf("cmd/sidecar depends on control-plane package %s", r)
		}
	}
}

// controlPlaneOnly are the packages only the control plane links: its
// halves, its wiring, the API types, the artifact store and the replica Lease.
func controlPlaneOnly(r string) bool {
	return half(r) != "" || r == "pkg/controlplane" || r == "api/v1alpha1" || within(r, "pkg/artifactstore") || r == "pkg/replicalease"
}

// The protocol packages are the contracts both halves import: they import
// neither half, nor anything else of the module but the names every side
// shares (api/names).
func TestProtocolPackagesImportNoHalf(t *testing.T) {
	allowed := map[string]map[string]bool{
		"pkg/binding": {"api/names": true},
		"pkg/upload":  {"api/names": true},
	}
	for _, p := range list(t, "./pkg/binding", "./pkg/upload") {
		ok, checked := allowed[rel(p.ImportPath)]
		if !checked {
			continue
		}
		for _, imp := range p.Imports {
			if internal(imp) && !ok[rel(imp)] {
				t.Errorf("%s imports %s", rel(p.ImportPath), rel(imp))
			}
		}
	}
}

// api/names is linked by every side, the sidecar included: it imports
// nothing at all, not even the standard library.
func TestNamesImportNothing(t *testing.T) {
	for _, p := range list(t, "./api/names") {
		if rel(p.ImportPath) == "api/names" && len(p.Imports) > 0 {
			t.Errorf("api/names imports %v: it holds names only, so that every binary can link it", p.Imports)
		}
	}
}
