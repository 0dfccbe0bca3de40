package endpoint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestErrorCodesListed: every apiError the package builds, and every
// objects.KeyError it passes on, uses a code in errorCodes, and every reason
// of its own is in ownReasons, so
// RefusalReasons (the counter series started at zero) misses no refusal the
// endpoint can answer.
func TestErrorCodesListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	keyFiles, err := filepath.Glob("../objects/*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, keyFiles...)
	fset := token.NewFileSet()
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok {
				// rq.reason = "...": a reason of the endpoint's own.
				for i, l := range as.Lhs {
					if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "reason" && i < len(as.Rhs) {
						if v, ok := as.Rhs[i].(*ast.BasicLit); ok && v.Kind == token.STRING {
							r, _ := strconv.Unquote(v.Value)
							if !slices.Contains(ownReasons, r) {
								t.Errorf("%s: reason %q is not in ownReasons", fset.Position(as.Pos()), r)
							}
						}
					}
				}
				return true
			}
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				// A code kept for later (checksum{code: ...}).
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "code" {
					if v, ok := kv.Value.(*ast.BasicLit); ok && v.Kind == token.STRING {
						c, _ := strconv.Unquote(v.Value)
						if !slices.Contains(errorCodes, c) {
							t.Errorf("%s: code %q is not in errorCodes", fset.Position(kv.Pos()), c)
						}
					}
				}
				return true
			}
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if id, ok := lit.Type.(*ast.Ident); !ok || (id.Name != "apiError" && id.Name != "KeyError") || len(lit.Elts) < 2 {
				return true
			}
			if sel, ok := lit.Elts[1].(*ast.SelectorExpr); ok && (sel.Sel.Name == "Code" || sel.Sel.Name == "code") {
				return true // a code passed on (checkKey's KeyError, a checksum's): scanned where it is written
			}
			code, ok := lit.Elts[1].(*ast.BasicLit)
			if !ok || code.Kind != token.STRING {
				t.Errorf("%s: an apiError whose code is not a string literal: keep codes literal so this test sees them", fset.Position(lit.Pos()))
				return true
			}
			c, _ := strconv.Unquote(code.Value)
			seen++
			if !slices.Contains(errorCodes, c) {
				t.Errorf("%s: code %q is not in errorCodes: add it, or its first refusal is not counted as one", fset.Position(lit.Pos()), c)
			}
			return true
		})
	}
	if seen < 40 {
		t.Fatalf("found %d apiError literals; the scan no longer sees how the package builds them", seen)
	}
	if r := RefusalReasons(); len(r) != len(errorCodes)+len(ownReasons) || !slices.Contains(r, "service_unavailable") || !slices.Contains(r, "bad_digest") {
		t.Fatalf("RefusalReasons() = %v", r)
	}
}
