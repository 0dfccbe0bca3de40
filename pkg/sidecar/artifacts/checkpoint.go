package artifacts

import (
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/checkpoint"
)

// CheckpointFiles are the artifacts of a scan as the checkpoint detector
// sees them: every file the scan took, verified when the Uploader verified
// this very version of it (the size and mtime the scan saw), and every
// artifact the scan refused (too large, unreadable), never verified, so
// that a checkpoint holding one is never complete.
func (s *Syncer) CheckpointFiles(scan *ScanResult) []checkpoint.File {
	files := make([]checkpoint.File, 0, len(scan.Files)+len(scan.Errors))
	for _, f := range scan.Files {
		at, ok := s.cfg.Uploader.VerifiedAt(f.Path, f.Size, f.ModTime)
		files = append(files, checkpoint.File{Path: f.Path, Size: f.Size, Verified: ok, VerifiedAt: at})
	}
	for _, e := range scan.Errors {
		files = append(files, checkpoint.File{Path: e.Path})
	}
	return files
}

// noteCheckpoint runs the detector once per round, after its uploads, and
// keeps the answer for Checkpoint: heartbeats read it without a scan.
func (s *Syncer) noteCheckpoint(scan *ScanResult) {
	cp := s.detector.Newest(s.CheckpointFiles(scan))
	old := s.checkpoint.Swap(cp)
	if cp != nil && (old == nil || old.Path != cp.Path || old.Files != cp.Files || old.Bytes != cp.Bytes) {
		s.log.Info("checkpoint verified", "path", cp.Path, "step", cp.Step, "files", cp.Files, "bytes", cp.Bytes)
	}
}

// Checkpoint is the newest checkpoint whose every file the last round found
// verified (nil: none yet), for heartbeats.
func (s *Syncer) Checkpoint() *binding.Checkpoint { return s.checkpoint.Load() }
