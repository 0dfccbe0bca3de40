package archtest

// Rules for the test harness's own layout (the decision is in
// test/framework/localcluster/doc.go): shipped binaries link no test code, no
// package a shipped binary links has an init that exits the process, and
// the harness's files stay small enough to read.

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// shipped are the binaries `make build` ships.
const shipped = "./cmd/..."

// No shipped binary links the testing package: test helpers (and the
// flags testing registers) stay out of what a platform team runs.
// cmd/tether-demo links the local cluster, so its helpers must not need it.
func TestShippedBinariesDoNotLinkTesting(t *testing.T) {
	pkgs := list(t, shipped)
	linked := false
	for _, p := range pkgs {
		linked = linked || p.ImportPath == "testing"
		for _, imp := range p.Imports {
			if imp == "testing" {
				t.Errorf("%s imports testing, and %s links it", p.ImportPath, shipped)
			}
		}
	}
	if linked {
		t.Errorf("go list -deps %s lists testing", shipped)
	}
}

// No package of the module that a shipped binary links has an init() that
// exits the process: a helper the harness re-executes is a main package of
// its own (test/framework/localcluster/trainerv20relay), not a mode of every
// binary that happens to link the harness.
func TestNoInitExitsInShippedBinaries(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range list(t, shipped) {
		if !internal(p.ImportPath) {
			continue
		}
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, call := range exitsInInit(f) {
				t.Errorf("%s: init() calls %s (in %s, linked by %s)", fset.Position(call.Pos()), exitName(f, call), rel(p.ImportPath), shipped)
			}
		}
	}
}

// exiters are the calls that end the process.
var exiters = map[string]map[string]bool{
	"os":      {"Exit": true},
	"syscall": {"Exit": true},
	"log":     {"Fatal": true, "Fatalf": true, "Fatalln": true},
}

// exitsInInit returns the calls in f's init functions that end the process.
func exitsInInit(f *ast.File) []*ast.CallExpr {
	var calls []*ast.CallExpr
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != "init" || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && exitName(f, call) != "" {
				calls = append(calls, call)
			}
			return true
		})
	}
	return calls
}

// exitName is "os.Exit" (etc.) when call is one of the exiters, else "".
func exitName(f *ast.File, call *ast.CallExpr) string {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return ""
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		local := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local == x.Name && exiters[path][sel.Sel.Name] {
			return path + "." + sel.Sel.Name
		}
	}
	return ""
}

// maxHarnessLines bounds a hand-written non-test Go file of the harness.
const maxHarnessLines = 700

// harnessDirs hold the test estate: the suites and their framework.
var harnessDirs = []string{"test"}

// No hand-written non-test Go file of the harness passes 700 lines: one
// concern per file (generated files, marked as Go marks them, excepted).
func TestHarnessFilesAreSmall(t *testing.T) {
	for _, f := range largeFiles(t, harnessDirs, maxHarnessLines) {
		t.Errorf("%s has %d lines (at most %d for a hand-written file of the harness): split it by concern", f.path, f.lines, maxHarnessLines)
	}
}

// largeFile is a hand-written non-test Go file over a bound.
type largeFile struct {
	path  string // relative to the module
	lines int
}

// largeFiles walks dirs (relative to the module, testdata and hidden
// folders skipped) for hand-written non-test Go files of more than limit
// lines.
func largeFiles(t *testing.T, dirs []string, limit int) []largeFile {
	t.Helper()
	var out []largeFile
	for _, dir := range dirs {
		root := filepath.Join("../..", dir)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			lines, generated, err := countLines(path)
			if err != nil {
				return err
			}
			if !generated && lines > limit {
				r, _ := filepath.Rel("../..", path)
				out = append(out, largeFile{r, lines})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// countLines counts path's lines and tells whether it carries Go's
// generated-code marker ("// Code generated ... DO NOT EDIT." before the
// package clause).
func countLines(path string) (lines int, generated bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	header := true
	for sc.Scan() {
		lines++
		l := sc.Text()
		if header && strings.HasPrefix(l, "package ") {
			header = false
		}
		if header && strings.HasPrefix(l, "// Code generated ") && strings.HasSuffix(l, " DO NOT EDIT.") {
			generated = true
		}
	}
	return lines, generated, sc.Err()
}
