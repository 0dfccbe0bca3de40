package archtest

import "testing"

// maxSourceLines bounds a hand-written non-test Go file of what ships:
// the packages, the binaries and the API types.
const maxSourceLines = 700

// sourceDirs hold what ships.
var sourceDirs = []string{"pkg", "cmd", "api"}

// No hand-written non-test Go file under pkg/, cmd/ or api/ passes 700
// lines: one concern per file, so a file's name says what it
// holds (generated files, marked as Go marks them, excepted). A file that
// grows past it is split by concern, never allowed here.
func TestSourceFilesAreSmall(t *testing.T) {
	for _, f := range largeFiles(t, sourceDirs, maxSourceLines) {
		t.Errorf("%s has %d lines (at most %d for a hand-written file under pkg/, cmd/ or api/): split it by concern", f.path, f.lines, maxSourceLines)
	}
}
