package binding

import (
	"fmt"
	"time"
)

// Checkpoint is a checkpoint the trainer wrote (a directory such as
// checkpoint-500/, or one file such as epoch=3-step=900.ckpt) whose every
// file is verified in the store: what a preempted job can resume from.
// Only the sidecar knows which files the trainer put in it, so it reports
// one once the last of them is verified.
type Checkpoint struct {
	// Path is the checkpoint relative to the artifact directory; a
	// directory ends in "/".
	Path string `json:"path"`
	// Step is the training step its name carries.
	Step int64 `json:"step"`
	// Files and Bytes count its files.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// VerifiedAt is when its last file was verified.
	VerifiedAt time.Time `json:"verifiedAt"`
}

// check validates a reported checkpoint (nil is valid: none yet).
func (c *Checkpoint) check() error {
	switch {
	case c == nil:
		return nil
	case c.Path == "" || len(c.Path) > MaxReportedPathLength:
		return fmt.Errorf("checkpoint path of %d bytes (1..%d)", len(c.Path), MaxReportedPathLength)
	case c.Step < 0 || c.Files < 1 || c.Bytes < 0:
		return fmt.Errorf("checkpoint %q: step %d, files %d, bytes %d (want step >= 0, files >= 1, bytes >= 0)", c.Path, c.Step, c.Files, c.Bytes)
	}
	return nil
}
