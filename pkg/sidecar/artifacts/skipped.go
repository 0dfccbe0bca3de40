package artifacts

import (
	"github.com/tether-dev/tether/pkg/binding"
)

// noteSkipped keeps the round's skipped entries for Skipped and logs each
// entry once per reason: a symlink out of the directory is named, with
// where it points, the first time a scan meets it, not every round. The
// caller holds logMu.
func (s *Syncer) noteSkipped(list []SkippedFile) {
	seen := make(map[string]string, len(list))
	for _, f := range list {
		seen[f.Path] = f.Reason
		if s.loggedSkipped[f.Path] != f.Reason {
			s.log.Warn("artifact skipped", "path", f.Path, "reason", f.Reason)
		}
	}
	s.loggedSkipped = seen
	s.skipped = append(s.skipped[:0], list...)
}

// Skipped returns the entries the last round skipped, as many as a frame
// carries, and how many there were in all: heartbeats put them on the
// binding (status.artifacts.skipped).
func (s *Syncer) Skipped() ([]binding.SkippedEntry, int) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	all := make([]binding.SkippedEntry, len(s.skipped))
	for i, f := range s.skipped {
		all[i] = binding.SkippedEntry{Path: f.Path, Reason: f.Reason}
	}
	return binding.BoundSkipped(all)
}
