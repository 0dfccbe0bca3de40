package archtest

// Rules for the artifact store's owner: the wiring builds one store.Store
// per replica (pkg/artifactstore/store) and hands it to the S3-compatible
// endpoint and to the controllers alike. The controllers promote, drop and
// sweep through that Store, never through the endpoint's HTTP handler: a
// coupling the import graph cannot see if the wiring passes the handler as
// the controllers' store.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// endpointPkg is the artifact store's HTTP endpoint.
const endpointPkg = "pkg/artifactstore/endpoint"

// No package of the controller half imports the endpoint: what the
// controllers need of the store they take from store.Store.
func TestControllersDoNotImportTheEndpoint(t *testing.T) {
	for p, imps := range graph(t) {
		if half(p) != "the controller" {
			continue
		}
		for _, imp := range imps {
			if within(imp, endpointPkg) {
				t.Errorf("%s imports %s: a controller takes the artifact store (pkg/artifactstore/store), not its HTTP endpoint", p, imp)
			}
		}
	}
}

// endpoint.Handler exports ServeHTTP and nothing else, so it satisfies no
// interface a controller declares for the store (promotion, manifest checks,
// the upload sweep): the wiring cannot hand a controller the HTTP handler
// in the Store's place, with or without an import the graph shows.
func TestEndpointHandlerIsOnlyAnHTTPHandler(t *testing.T) {
	pkgs := list(t, "./"+endpointPkg)
	var dir string
	var files []string
	for _, p := range pkgs {
		if rel(p.ImportPath) == endpointPkg {
			dir, files = p.Dir, p.GoFiles
		}
	}
	if dir == "" {
		t.Fatalf("go list found no %s", endpointPkg)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() || fn.Name.Name == "ServeHTTP" {
				continue
			}
			if receiverName(fn.Recv.List[0].Type) == "Handler" {
				t.Errorf("%s: endpoint.Handler exports %s: the store's operations are store.Store's; the Handler is only the store's HTTP door (ServeHTTP)",
					fset.Position(fn.Pos()), fn.Name.Name)
			}
		}
	}
}

// receiverName is the type name of a method's receiver (T or *T).
func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
