package checkpoint

import (
	"errors"
	"strings"
	"testing"
)

func TestParsePatternRefuses(t *testing.T) {
	for _, tc := range []struct {
		pattern, problem string
	}{
		{"", "empty"},
		{strings.Repeat("a", 250) + "{step}/", "257 bytes, at most 256"},
		{"/ckpt/checkpoint-{step}/", "absolute"},
		{"checkpoint/", "0 {step} placeholders"},
		{"checkpoint-{step}-{step}/", "2 {step} placeholders"},
		{"../checkpoint-{step}/", `a ".." component`},
		{"ckpt/../checkpoint-{step}/", `a ".." component`},
		{"./checkpoint-{step}/", `a "." component`},
		{"ckpt//checkpoint-{step}/", "empty component"},
		{"checkpoint-{step}//", "empty component"},
		{"**/checkpoint-{step}/", `"**"`},
		{"checkpoint-{iter}-{step}/", "unknown placeholder"},
		{"checkpoint-{step/", "0 {step} placeholders"},
		{"checkpoint-{step}}/", "unknown placeholder"},
		{"checkpoint-{step}\n", "control character"},
		{"HuggingFace", "0 {step} placeholders"}, // preset names are lower case
	} {
		_, err := ParsePattern(tc.pattern)
		var pe *PatternError
		if !errors.As(err, &pe) {
			t.Errorf("ParsePattern(%q) = %v, want a *PatternError", tc.pattern, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(pe.Problem, tc.problem) || !strings.Contains(msg, "checkpoint-{step}/") || !strings.Contains(msg, "huggingface") {
			t.Errorf("ParsePattern(%q): %q, want it to say %q and give an example and the presets", tc.pattern, msg, tc.problem)
		}
	}
}

func TestParsePatternAcceptsPresetNames(t *testing.T) {
	for _, name := range PresetNames() {
		p, err := ParsePattern(name)
		if err != nil || p.String() != presets[name].String() {
			t.Errorf("ParsePattern(%q) = %q, %v; want the preset", name, p, err)
		}
	}
	if p, _ := ParsePattern("dcp"); !p.Dir() || len(p.Required()) != 1 || p.Required()[0] != ".metadata" {
		t.Errorf("dcp preset: dir %v, required %v; want a directory that needs .metadata", p.Dir(), p.Required())
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, path, checkpoint string
		step                      int64 // -1: no match
	}{
		// Directory checkpoints: every file under the directory, at any depth.
		{"checkpoint-{step}/", "checkpoint-500/model.safetensors", "checkpoint-500/", 500},
		{"checkpoint-{step}/", "out/run1/checkpoint-500/global_step500/mp_rank_00.pt", "out/run1/checkpoint-500/", 500},
		{"checkpoint-{step}/", "checkpoint-500", "", -1}, // a file, not a directory
		{"checkpoint-{step}/", "checkpoint-500a/x", "", -1},
		{"checkpoint-{step}/", "checkpoint-/x", "", -1},
		{"checkpoint-{step}/", "checkpoint-007/x", "checkpoint-007/", 7},
		{"checkpoint-{step}/", "checkpoint-99999999999999999999/x", "", -1}, // overflows int64
		{"ckpt/checkpoint-{step}/", "ckpt/checkpoint-3/x", "ckpt/checkpoint-3/", 3},
		{"ckpt/checkpoint-{step}/", "other/checkpoint-3/x", "", -1},
		{"ckpt/checkpoint-{step}/", "a/ckpt/checkpoint-3/b/x", "a/ckpt/checkpoint-3/", 3},
		// The innermost matching directory.
		{"step-{step}/", "step-1/step-2/x", "step-1/step-2/", 2},
		{"step-{step}/", "step-1/x/y", "step-1/", 1},
		// Files.
		{"epoch={epoch}-step={step}.ckpt", "lightning_logs/version_0/checkpoints/epoch=3-step=900.ckpt",
			"lightning_logs/version_0/checkpoints/epoch=3-step=900.ckpt", 900},
		{"epoch={epoch}-step={step}.ckpt", "epoch=3-step=900.ckpt.tmp", "", -1},
		{"*-step={step}.ckpt", "epoch=3-step=900.ckpt", "epoch=3-step=900.ckpt", 900},
		{"*step={step}*.ckpt", "epoch=3-step=900-v1.ckpt", "epoch=3-step=900-v1.ckpt", 900},
		{"*step={step}*.ckpt", "last.ckpt", "", -1},
		{"*step={step}*.ckpt", "dir/epoch=3-step=900.ckpt/x", "", -1}, // '*' never crosses '/'
		{"step-{step}/model.pt", "run/step-40/model.pt", "run/step-40/model.pt", 40},
		// The step is a whole run of digits, the last one that fits.
		{"checkpoint*{step}*/", "checkpoint-v2-500/x", "checkpoint-v2-500/", 500},
		{"checkpoint*{step}*/", "checkpoint_12_final/x", "checkpoint_12_final/", 12},
		{"checkpoint*{step}*/", "checkpoints/x", "", -1},
		{"v{step}/", "v12/x", "v12/", 12},
		// Malformed paths match nothing.
		{"checkpoint-{step}/", "/checkpoint-1/x", "", -1},
		{"checkpoint-{step}/", "checkpoint-1//x", "", -1},
		{"checkpoint-{step}/", "", "", -1},
	} {
		p, err := ParsePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		cp, step, ok := p.Match(tc.path)
		if tc.step < 0 {
			if ok {
				t.Errorf("%q.Match(%q) = %q, %d; want no match", tc.pattern, tc.path, cp, step)
			}
			continue
		}
		if !ok || cp != tc.checkpoint || step != tc.step {
			t.Errorf("%q.Match(%q) = %q, %d, %v; want %q, %d", tc.pattern, tc.path, cp, step, ok, tc.checkpoint, tc.step)
		}
	}
}

func TestPresetsMatchWhatTrainersWrite(t *testing.T) {
	for _, tc := range []struct {
		preset     Pattern
		path, ckpt string
	}{
		{HuggingFace, "output/checkpoint-500/trainer_state.json", "output/checkpoint-500/"},
		{SimpleTuner, "output/checkpoint-500/unet/diffusion_pytorch_model.safetensors", "output/checkpoint-500/"},
		{DCP, "ckpt/step-100/__0_0.distcp", "ckpt/step-100/"},
		{Lightning, "checkpoints/epoch=0-step=50.ckpt", "checkpoints/epoch=0-step=50.ckpt"},
		{TorchTitan, "outputs/checkpoint/step-1000/.metadata", "outputs/checkpoint/step-1000/"},
	} {
		if cp, _, ok := tc.preset.Match(tc.path); !ok || cp != tc.ckpt {
			t.Errorf("preset %q.Match(%q) = %q, %v; want %q", tc.preset, tc.path, cp, ok, tc.ckpt)
		}
	}
	if _, _, ok := TorchTitan.Match("outputs/step-1000/.metadata"); ok {
		t.Error("the TorchTitan preset matched a step directory outside checkpoint/")
	}
}
