package binding

// ProgressFile is the optional file, relative to the artifact directory, where
// a trainer can append one JSON object per line ({"step":100,"epoch":1.5,
// "loss":0.23}); the sidecar reports the last complete line in heartbeats.
const ProgressFile = "tether-progress.jsonl"

// EnvCheckpointPattern optionally names the trainer's checkpoint layout for
// the sidecar: a pattern with a {step} placeholder ("checkpoint-{step}/", a
// directory per checkpoint; "epoch={epoch}-step={step}.ckpt", a file per
// checkpoint) or a preset's name (pkg/checkpoint). The sidecar reports the
// newest checkpoint it matches, with the default patterns (checkpoint* and
// step* directories) after it.
const EnvCheckpointPattern = "TETHER_CHECKPOINT_PATTERN"
