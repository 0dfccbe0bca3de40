package checkpoint

import "slices"

// Presets: the layouts trainers write, each with how the trainer resumes
// from one. A preset's name is accepted by ParsePattern.
var (
	// HuggingFace is the Transformers Trainer's <output_dir>/checkpoint-<global
	// step>/. It resumes with Trainer.train(resume_from_checkpoint=<path>),
	// or resume_from_checkpoint=True for the newest one in output_dir. A
	// checkpoint is complete only with trainer_state.json, which the Trainer
	// writes after the weights, optimizer and scheduler.
	HuggingFace = preset("checkpoint-{step}/", "trainer_state.json")
	// SimpleTuner writes <output_dir>/checkpoint-<step>/ (Accelerate's
	// save_state) and resumes with --resume_from_checkpoint=latest (or the
	// directory's name).
	SimpleTuner = preset("checkpoint-{step}/")
	// DCP is a PyTorch Distributed Checkpoint in step-<step>/: every rank's
	// .distcp files and a .metadata file, written last, without which the
	// checkpoint is incomplete. It resumes with
	// torch.distributed.checkpoint.load(state_dict, checkpoint_id=<path>).
	DCP = preset("step-{step}/", ".metadata")
	// Lightning is a PyTorch Lightning ModelCheckpoint file such as
	// epoch=3-step=900.ckpt (its default "{epoch}-{step}" file name, with
	// any prefix or version suffix). It resumes with
	// Trainer.fit(model, ckpt_path=<path>).
	Lightning = preset("*step={step}*.ckpt")
	// TorchTitan writes DCP checkpoints to <dump_folder>/checkpoint/step-<step>/
	// and, with --checkpoint.enable_checkpoint, resumes from the newest step
	// in that folder (--checkpoint.load_step picks another).
	TorchTitan = preset("checkpoint/step-{step}/", ".metadata")
)

// presets by name, for ParsePattern.
var presets = map[string]Pattern{
	"huggingface": HuggingFace,
	"simpletuner": SimpleTuner,
	"dcp":         DCP,
	"lightning":   Lightning,
	"torchtitan":  TorchTitan,
}

// PresetNames are the names ParsePattern takes for the presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Default is what a Detector uses without patterns: any directory, at any
// depth, whose name starts with "checkpoint" or "step" and carries a
// number, the last run of digits being the step (checkpoint-500/,
// checkpoint_500/, step-1000/, step500/). A directory of DCP .distcp files
// needs its .metadata, as with every pattern.
func Default() []Pattern {
	return []Pattern{preset("checkpoint*{step}*/"), preset("step*{step}*/")}
}

// preset parses a pattern known to be valid.
func preset(text string, required ...string) Pattern {
	p, err := parsePattern(text)
	if err != nil {
		panic(err)
	}
	p.required = required
	return p
}
