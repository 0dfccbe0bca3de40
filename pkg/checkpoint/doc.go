// Package checkpoint finds the newest complete checkpoint in a list of
// artifact files: the sidecar runs it over the files it has verified, and
// the control plane can run the same rules over a store listing.
//
// A Pattern says what a checkpoint's path looks like, with a {step}
// placeholder for the training step its name carries: "checkpoint-{step}/"
// (a trailing "/": a directory, every file under it) or
// "epoch={epoch}-step={step}.ckpt" (one file). A pattern matches at any
// depth: its components match the last components of a checkpoint's path.
// Presets name the layouts trainers write (HuggingFace, DCP, Lightning,
// TorchTitan, SimpleTuner); Default finds checkpoint* and step* directories.
//
// A Detector returns the checkpoint of the highest step whose every file is
// verified and whose required files are present; a newer one still being
// written or uploaded leaves the older complete one reported. The package
// does no I/O.
package checkpoint
