package archtest

import (
	"sort"
	"strings"
	"testing"
)

// The control plane's halves: each runs on its own on the manager, and only
// the wiring (pkg/controlplane) and the binaries put them together. They
// share what sits below them (api/v1alpha1, pkg/binding, pkg/upload, the
// artifact store's packages under pkg/artifactstore, pkg/lifecycle,
// pkg/trainjob, pkg/jobconfig, pkg/replicalease) and nothing else.
// pkg/artifactstore is below, not a half: the binding server serves its
// S3-compatible endpoint and the controller promotes and re-verifies through
// it. A half may be several packages (the binding server and its worker
// gate); they import each other freely.
var halves = map[string][]string{
	"the controller":     {"pkg/controller"},
	"the binding server": {"pkg/bindingserver", "pkg/workerauth"},
	"the read endpoint":  {"pkg/artifactreads"},
	"the webhooks":       {"pkg/mutate"},
}

// half is the half p belongs to, or "".
func half(p string) string {
	for name, pkgs := range halves {
		for _, h := range pkgs {
			if p == h || strings.HasPrefix(p, h+"/") {
				return name
			}
		}
	}
	return ""
}

// wiring may import every half.
func wiring(p string) bool {
	return p == "pkg/controlplane" || strings.HasPrefix(p, "cmd/")
}

// graph is the module's own import graph (non-test imports), by path
// relative to the module.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	g := map[string][]string{}
	for _, p := range list(t, "./...") {
		if !internal(p.ImportPath) {
			continue
		}
		var imps []string
		for _, imp := range p.Imports {
			if internal(imp) {
				imps = append(imps, rel(imp))
			}
		}
		g[rel(p.ImportPath)] = imps
	}
	return g
}

// No half imports another, and nothing under pkg/ or api/ but the wiring
// imports a half: a rule two halves must agree on lives below both
// (pkg/lifecycle, pkg/trainjob, ...), never in one of them.
func TestNoImportsBetweenHalves(t *testing.T) {
	for p, imps := range graph(t) {
		if wiring(p) || !(strings.HasPrefix(p, "pkg/") || strings.HasPrefix(p, "api/")) {
			continue
		}
		for _, imp := range imps {
			h := half(imp)
			if h == "" || h == half(p) {
				continue
			}
			if half(p) != "" {
				t.Errorf("%s imports %s: the control plane's halves import none of each other (%s is %s's, %s %s's; put what both need below them)", p, imp, p, half(p), imp, h)
			} else {
				t.Errorf("%s imports %s: only the wiring (pkg/controlplane, cmd/) imports a half of the control plane", p, imp)
			}
		}
	}
}

// folderAllowlist holds imports of a folder above the importer's own that
// are accepted as debt, by kind (see TestNoImportOfAFolderAbove). It is
// empty: the servers left their contracts' folders (pkg/bindingserver,
// pkg/artifactstore). The test fails when an entry is no longer needed, so
// the list only shrinks.
var folderAllowlist = map[string]string{}

// folders are the folders that hold p, innermost last, from the second
// level down ("pkg/a/b/c": pkg/a, pkg/a/b, pkg/a/b/c).
func folders(p string) []string {
	parts := strings.Split(p, "/")
	var out []string
	for i := 2; i <= len(parts); i++ {
		out = append(out, strings.Join(parts[:i], "/"))
	}
	return out
}

func within(p, folder string) bool { return p == folder || strings.HasPrefix(p, folder+"/") }

// Every folder sits at one level of the package graph, so a folder's name
// says where its packages are:
//
//   - "parent": a package does not import a folder that holds it (a
//     package under pkg/a/b imports no pkg/a nor pkg/a/b): the package of a
//     folder is not the contract of the folders inside it; a contract and its
//     implementation sit side by side.
//   - "up": a package does not import into a folder that holds a package
//     depending on it: that folder would be both below and above it.
func TestNoImportOfAFolderAbove(t *testing.T) {
	g := graph(t)
	// above[p] is every package that depends on p, directly or not.
	above := map[string]map[string]bool{}
	for p := range g {
		seen, todo := map[string]bool{}, []string{p}
		for len(todo) > 0 {
			q := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			for _, imp := range g[q] {
				if !seen[imp] {
					seen[imp] = true
					todo = append(todo, imp)
				}
			}
		}
		for q := range seen {
			if above[q] == nil {
				above[q] = map[string]bool{}
			}
			above[q][p] = true
		}
	}
	found := map[string]string{}
	for p, imps := range g {
		for _, imp := range imps {
			edge := p + " -> " + imp
			if within(p, imp) {
				found[edge] = "parent"
				if folderAllowlist[edge] != "parent" {
					t.Errorf("%s: a package imports no folder that holds it; move the contract beside its implementation", edge)
				}
				continue
			}
			for _, f := range folders(imp) {
				if within(p, f) {
					continue
				}
				var by []string
				for q := range above[p] {
					if within(q, f) {
						by = append(by, q)
					}
				}
				if len(by) > 0 {
					sort.Strings(by)
					found[edge] = "up"
					if folderAllowlist[edge] != "up" {
						t.Errorf("%s: %s holds %s, which depends on %s: import a package that sits below, not into a folder above", edge, f, strings.Join(by, ", "), p)
					}
					break
				}
			}
		}
	}
	for edge, kind := range folderAllowlist {
		if found[edge] != kind {
			t.Errorf("allowlist entry %q (%s) is no longer needed: remove it", edge, kind)
		}
	}
}
