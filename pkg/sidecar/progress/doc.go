// Package progress reads the trainer's optional progress file
// (binding.ProgressFile in the artifact directory): the last complete JSON
// line, within a bounded window at the file's end, for the sidecar's
// heartbeats.
package progress
