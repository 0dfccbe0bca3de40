package progress

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

func progressFile(t *testing.T, content string) (*Reader, string) {
	t.Helper()
	dir := t.TempDir()
	r := NewReader(dir)
	if err := os.WriteFile(r.Path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return r, r.Path
}

func readProgress(t *testing.T, r *Reader) *binding.Progress {
	t.Helper()
	p, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stepOf(p *binding.Progress) int64 {
	if p == nil || p.Step == nil {
		return -1
	}
	return *p.Step
}

func TestProgressMissingFile(t *testing.T) {
	r := NewReader(t.TempDir())
	if p := readProgress(t, r); p != nil {
		t.Errorf("got %+v for a missing file", p)
	}
	if r.Progress() != nil {
		t.Error("Progress() not nil")
	}
}

func TestProgressLastCompleteLine(t *testing.T) {
	r, path := progressFile(t, `{"step":1,"loss":0.9}
{"step":100,"epoch":1.5,"loss":0.23,"fraction":0.4,"lr":0.001}
{"step":101,"epo`)
	mtime := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	p := readProgress(t, r)
	if p == nil || *p.Step != 100 || *p.Epoch != 1.5 || *p.Loss != 0.23 || *p.Fraction != 0.4 {
		t.Fatalf("got %+v, want step 100 (the partial last line ignored)", p)
	}
	if !p.UpdatedAt.Equal(mtime) {
		t.Errorf("UpdatedAt %v, want the mtime %v", p.UpdatedAt, mtime)
	}
}

func TestProgressSkipsGarbage(t *testing.T) {
	for name, content := range map[string]string{
		"garbage after":       "{\"step\":5}\nnot json\n",
		"empty lines":         "{\"step\":5}\n\n   \n",
		"no known field":      "{\"step\":5}\n{\"msg\":\"hello\"}\n",
		"not an object":       "{\"step\":5}\n[1,2]\n42\nnull\n",
		"crlf":                "{\"step\":5}\r\n",
		"bad type":            "{\"step\":5}\n{\"step\":\"six\"}\n",
		"number out of range": "{\"step\":5}\n{\"loss\":1e999}\n",
		"unterminated after":  "{\"step\":5}\n{\"step\":6}",
	} {
		r, _ := progressFile(t, content)
		if got := stepOf(readProgress(t, r)); got != 5 {
			t.Errorf("%s: step %d, want 5", name, got)
		}
	}
	for name, content := range map[string]string{
		"empty":       "",
		"only junk":   "junk\n{}\n",
		"no newline":  `{"step":5}`,
		"binary junk": "\x00\x01\x02\n",
	} {
		r, _ := progressFile(t, content)
		if p := readProgress(t, r); p != nil {
			t.Errorf("%s: got %+v, want nil", name, p)
		}
	}
}

func TestProgressDropsInvalidValues(t *testing.T) {
	r, _ := progressFile(t, `{"step":7.0,"fraction":1.5,"loss":-2}`+"\n")
	p := readProgress(t, r)
	if stepOf(p) != 7 || p.Fraction != nil || p.Loss == nil || *p.Loss != -2 {
		t.Errorf("got %+v, want step 7, no fraction, loss -2", p)
	}
}

func TestProgressFollowsRewrites(t *testing.T) {
	r, path := progressFile(t, strings.Repeat("{\"step\":1}\n", 1000)+"{\"step\":1000}\n")
	if got := stepOf(readProgress(t, r)); got != 1000 {
		t.Fatalf("step %d", got)
	}
	// Truncated and rewritten shorter, in place.
	if err := os.WriteFile(path, []byte("{\"step\":3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := stepOf(readProgress(t, r)); got != 3 {
		t.Errorf("after truncation: step %d, want 3", got)
	}
	// Replaced by rename.
	tmp := filepath.Join(filepath.Dir(path), "new")
	if err := os.WriteFile(tmp, []byte("{\"step\":4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := stepOf(readProgress(t, r)); got != 4 {
		t.Errorf("after replacement: step %d, want 4", got)
	}
}

func TestProgressReadsOnlyTheWindow(t *testing.T) {
	// A large file: only the end is read, and the line the window cuts
	// into is never taken for a complete one, even if its tail parses.
	head := strings.Repeat("x", 100) + `{"step":9}` + "\n"
	r, _ := progressFile(t, head+"junk\n")
	r.Window = int64(len(`{"step":9}`) + 1 + len("junk\n"))
	if p := readProgress(t, r); p != nil {
		t.Errorf("got %+v from a line cut by the window", p)
	}
	r.Window = 0 // default: 64 KiB
	big := strings.Repeat(`{"step":1,"pad":"`+strings.Repeat("p", 100)+`"}`+"\n", 2000) + `{"step":2}` + "\n"
	r2, _ := progressFile(t, big)
	if got := stepOf(readProgress(t, r2)); got != 2 {
		t.Errorf("step %d, want 2", got)
	}
	// A last line longer than the window cannot be read.
	r3, _ := progressFile(t, `{"step":2,"pad":"`+strings.Repeat("p", DefaultWindow)+`"}`+"\n")
	if p := readProgress(t, r3); p != nil {
		t.Errorf("got %+v from a line longer than the window", p)
	}
}

func TestProgressRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "secret")
	if err := os.WriteFile(target, []byte("{\"step\":1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := NewReader(dir)
	if err := os.Symlink(target, r.Path); err != nil {
		t.Skip(err)
	}
	if p, err := r.Read(); p != nil || !errors.Is(err, errNotRegular) {
		t.Errorf("symlink: got %+v, %v; want errNotRegular", p, err)
	}
	if r.Progress() != nil {
		t.Error("Progress() followed a symlink")
	}
	os.Remove(r.Path)
	if err := os.Mkdir(r.Path, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); !errors.Is(err, errNotRegular) {
		t.Errorf("directory: %v", err)
	}
}
