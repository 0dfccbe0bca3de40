package names_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// nameLike is what a name crossing a process looks like where
// docs/contract.md writes it: a tether.dev/ key, a Tether header, a TETHER_
// variable.
var nameLike = regexp.MustCompile(`^(tether\.dev/[a-z0-9-]+|(X-)?Tether-[A-Za-z-]+|TETHER_[A-Z_]+)$`)

// notNames are what docs/contract.md writes in that form that are not
// names of this package: the aggregated read API's group/version, which
// api/v1alpha1 defines beside its types.
var notNames = map[string]bool{"artifacts.tether.dev/v1alpha1": true}

// constants are the exported string constants of names.go, by value.
func constants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING || !n.IsExported() {
					continue
				}
				val, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out[val] = n.Name
			}
		}
	}
	return out
}

// docNames are the backquoted words of docs/contract.md.
func docNames(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

// Every name this package defines is written in docs/contract.md, and every
// name docs/contract.md writes is defined here: the code and the contract
// cannot drift apart.
func TestContractListsEveryName(t *testing.T) {
	consts, doc := constants(t), docNames(t)
	if len(consts) < 50 {
		t.Fatalf("found %d constants in names.go; the parser missed them", len(consts))
	}
	for val, name := range consts {
		if nameLike.MatchString(val) && !doc[val] {
			t.Errorf("names.%s = %q is not in docs/contract.md: add it to the table \"Every name that crosses a process\"", name, val)
		}
	}
	for word := range doc {
		if nameLike.MatchString(word) && !notNames[word] {
			if _, ok := consts[word]; !ok {
				t.Errorf("docs/contract.md names %q, which api/names does not define: define it there, or correct the document", word)
			}
		}
	}
}
