package artifacts

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/upload"
)

func paths(fs []LocalFile) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

func TestScanSymlinksAreNeverFollowed(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, outside, "secret.txt", []byte("secret"))
	writeFile(t, outside, "sub/deep.txt", []byte("deep"))
	dir := filepath.Join(t.TempDir(), "artifacts")
	writeFile(t, dir, "model.bin", []byte("model"))
	writeFile(t, dir, "sub/inner.txt", []byte("inner"))
	must(t, os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "abs-out")))
	must(t, os.Symlink("../../"+filepath.Base(outside)+"/secret.txt", filepath.Join(dir, "sub", "rel-out")))
	must(t, os.Symlink("../model.bin", filepath.Join(dir, "sub", "rel-in")))
	must(t, os.Symlink(outside, filepath.Join(dir, "dir-out")))
	must(t, os.Symlink("sub", filepath.Join(dir, "dir-in")))
	must(t, os.Symlink("/nonexistent/dangling", filepath.Join(dir, "dangling")))

	res, err := newTestScanner(t, dir, nil).Scan(true)
	must(t, err)
	if got, want := paths(res.Files), []string{"model.bin", "sub/inner.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
	reasons := map[string]string{}
	for _, s := range res.Skipped {
		reasons[s.Path] = s.Reason
	}
	for _, p := range []string{"abs-out", "sub/rel-out", "dir-out", "dangling"} {
		if !strings.Contains(reasons[p], "outside the artifact directory") {
			t.Errorf("%s: reason %q, want it to say it points outside", p, reasons[p])
		}
	}
	for _, p := range []string{"sub/rel-in", "dir-in"} {
		if r := reasons[p]; !strings.Contains(r, "never followed") || strings.Contains(r, "outside") {
			t.Errorf("%s: reason %q", p, r)
		}
	}
	if len(res.Errors) != 0 {
		t.Errorf("errors: %v", res.Errors)
	}
}

func TestScanKeepsNamesExact(t *testing.T) {
	dir := t.TempDir()
	names := []string{
		"-leading-dash", "--", "with space.txt", " leading space", "trailing space ",
		"ünïcødé/файл.bin", "模型/权重.safetensors", "a,b{c}[d].txt", "#hash?q=1&x=%20", "back\\slash", "new\nline",
		binding.ProgressFile, "sub/manifest.json", "sub/.tether/x", ".hidden/.file",
	}
	for _, n := range names {
		writeFile(t, dir, n, []byte(n))
	}
	res, err := newTestScanner(t, dir, nil).Scan(true)
	must(t, err)
	got := paths(res.Files)
	want := slices.Sorted(slices.Values(names))
	slices.Sort(got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("files\n %q\nwant\n %q", got, want)
	}
}

func TestScanRefusesReservedAndInvalidNames(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, upload.ManifestName, []byte("{}"))
	writeFile(t, dir, ".tether/pending/x", []byte("x"))
	writeFile(t, dir, "bad-\xff-utf8", []byte("x"))
	writeFile(t, dir, "ok", []byte("ok"))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	res, err := newTestScanner(t, dir, nil).Scan(true)
	must(t, err)
	if got := paths(res.Files); !reflect.DeepEqual(got, []string{"ok"}) {
		t.Errorf("files %q", got)
	}
	errs := map[string]string{}
	for _, e := range res.Errors {
		errs[e.Path] = e.Error()
	}
	if !strings.Contains(errs[upload.ManifestName], "manifest") || !strings.Contains(errs[".tether/pending/x"], "reserved") ||
		!strings.Contains(errs["bad-\xff-utf8"], "UTF-8") || len(errs) != 3 {
		t.Errorf("errors %q", errs)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Path != "fifo" || !strings.Contains(res.Skipped[0].Reason, "not a regular file") {
		t.Errorf("skipped %+v", res.Skipped)
	}
}

func TestScanIncludeExclude(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{
		"ckpt/step-1/model.safetensors", "ckpt/step-1/opt.pt", "ckpt/tmp/partial.pt", "ckpt/x.tmp",
		"model.safetensors", "tokenizer.json", "config.json", "logs/train.log", "logs/deep/a.json",
		"notes.txt", binding.ProgressFile,
	} {
		writeFile(t, dir, n, []byte(n))
	}
	include := jobconfig.SplitGlobs("ckpt/**, *.{safetensors,json}, " + binding.ProgressFile)
	exclude := jobconfig.SplitGlobs("ckpt/tmp/**,**/*.tmp,config.json")
	if len(include) != 3 || len(exclude) != 3 {
		t.Fatalf("split %q %q", include, exclude)
	}
	s := newTestScanner(t, dir, func(c *ScannerConfig) { c.Include, c.Exclude = include, exclude })
	res, err := s.Scan(true)
	must(t, err)
	want := []string{"ckpt/step-1/model.safetensors", "ckpt/step-1/opt.pt", "model.safetensors", "tether-progress.jsonl", "tokenizer.json"}
	if got := paths(res.Files); !reflect.DeepEqual(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}
	if !slices.Equal(s.pruneDirs, []string{"ckpt/tmp"}) {
		t.Errorf("pruned %q", s.pruneDirs)
	}

	// Only the exclude list.
	res, err = newTestScanner(t, dir, func(c *ScannerConfig) { c.Exclude = []string{"logs/**"} }).Scan(true)
	must(t, err)
	for _, f := range res.Files {
		if strings.HasPrefix(f.Path, "logs/") {
			t.Errorf("%s not excluded", f.Path)
		}
	}
	if len(res.Files) != 9 {
		t.Errorf("files %q", paths(res.Files))
	}

	for _, bad := range [][]string{{"/abs/**"}, {"a/[b"}, {""}} {
		if _, err := NewScanner(ScannerConfig{Dir: dir, Exclude: bad}); err == nil {
			t.Errorf("glob %q accepted", bad)
		}
	}
}

// A file over 5 GiB is an error naming it, the limit and the exclude
// annotation; the others are still taken.
func TestScanTooLargeFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.txt", []byte("a"))
	writeFile(t, dir, "z.txt", []byte("z"))
	f, err := os.Create(filepath.Join(dir, "huge.bin"))
	must(t, err)
	must(t, f.Truncate(upload.MaxObjectSize+1)) // sparse
	f.Close()
	f, err = os.Create(filepath.Join(dir, "limit.bin"))
	must(t, err)
	must(t, f.Truncate(upload.MaxObjectSize)) // exactly the limit: allowed
	f.Close()

	res, err := newTestScanner(t, dir, nil).Scan(true)
	must(t, err)
	if got := paths(res.Files); !reflect.DeepEqual(got, []string{"a.txt", "limit.bin", "z.txt"}) {
		t.Errorf("files %q", got)
	}
	if len(res.Errors) != 1 {
		t.Fatalf("errors %v", res.Errors)
	}
	msg := res.Errors[0].Error()
	for _, want := range []string{`"huge.bin"`, "5 TiB", "tether.dev/exclude"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not mention %q", msg, want)
		}
	}
	t.Log(msg)
}

func TestScanSettleTime(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	clock := func() time.Time { return now }
	s := newTestScanner(t, dir, func(c *ScannerConfig) { c.Settle = 10 * time.Second; c.Now = clock })
	writeFile(t, dir, "growing.log", []byte("1\n"))
	writeFile(t, dir, "old.bin", []byte("old"))
	old := now.Add(-time.Hour)
	must(t, os.Chtimes(filepath.Join(dir, "old.bin"), old, old))

	finished := func(final bool) map[string]bool {
		res, err := s.Scan(final)
		must(t, err)
		m := map[string]bool{}
		for _, f := range res.Files {
			m[f.Path] = f.Finished
		}
		return m
	}
	if got := finished(false); got["growing.log"] || !got["old.bin"] {
		t.Errorf("t=0: %v; want only the old file finished", got)
	}
	now = now.Add(6 * time.Second)
	if got := finished(false); got["growing.log"] {
		t.Errorf("t=6s: %v", got)
	}
	// Written again: the settle time starts over.
	f, err := os.OpenFile(filepath.Join(dir, "growing.log"), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, _ = f.WriteString("2\n")
	f.Close()
	mt := now
	must(t, os.Chtimes(filepath.Join(dir, "growing.log"), mt, mt))
	now = now.Add(6 * time.Second)
	if got := finished(false); got["growing.log"] {
		t.Errorf("t=12s (changed at 6s): %v", got)
	}
	if got := finished(true); !got["growing.log"] {
		t.Errorf("final scan: %v; want every file", got)
	}
	now = now.Add(5 * time.Second)
	if got := finished(false); !got["growing.log"] {
		t.Errorf("t=17s (unchanged 11s): %v", got)
	}
}
