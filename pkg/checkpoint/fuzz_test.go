package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/binding"
)

// FuzzParsePattern: a pattern (the env var or annotation a user writes) is
// either refused with a *PatternError naming the pattern and giving an
// example, or parsed into one that matches paths only with a checkpoint
// path that is the file or a directory above it, and never panics.
func FuzzParsePattern(f *testing.F) {
	f.Add("checkpoint-{step}/", "out/checkpoint-500/model.safetensors")
	f.Add("epoch={epoch}-step={step}.ckpt", "ckpt/epoch=3-step=900.ckpt")
	f.Add("*step={step}*.ckpt", "epoch=3-step=900-v1.ckpt")
	f.Add("ckpt/step-{step}/", "a/ckpt/step-1/step-2/x")
	f.Add("../{step}/", "//")
	f.Add("dcp", "step-10/.metadata")
	f.Add("*{step}*{epoch}*", "1a2b3c4d5e6f7g8h9")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			var pe *PatternError
			if !errors.As(err, &pe) || pe.Pattern != pattern || pe.Problem == "" || !strings.Contains(err.Error(), "checkpoint-{step}/") {
				t.Fatalf("ParsePattern(%q): %v is not a *PatternError naming the pattern with an example", pattern, err)
			}
			return
		}
		if _, ok := presets[pattern]; !ok && (pattern == "" || len(pattern) > MaxPatternLength || strings.Count(pattern, "{step}") != 1) {
			t.Fatalf("ParsePattern accepted %q", pattern)
		}
		cp, step, ok := p.Match(path)
		if !ok {
			return
		}
		switch {
		case step < 0:
			t.Fatalf("%q.Match(%q): step %d", pattern, path, step)
		case p.Dir() && (!strings.HasSuffix(cp, "/") || !strings.HasPrefix(path, cp) || len(cp) >= len(path)):
			t.Fatalf("%q.Match(%q) = %q: not a directory above the file", pattern, path, cp)
		case !p.Dir() && cp != path:
			t.Fatalf("%q.Match(%q) = %q: a file pattern names the file itself", pattern, path, cp)
		}
		got := NewDetector(p).Newest([]File{{Path: path, Size: 1, Verified: true}})
		// One verified file is a complete checkpoint unless something it
		// needs is missing or its path is too long for a heartbeat.
		needsMore := len(p.Required()) > 0 || strings.HasSuffix(path, dcpData) || len(cp) > binding.MaxReportedPathLength
		if (got == nil && !needsMore) || (got != nil && (got.Step != step || got.Path != cp)) {
			t.Fatalf("Newest of the one verified file %q under %q = %+v, want %q step %d", path, pattern, got, cp, step)
		}
	})
}
