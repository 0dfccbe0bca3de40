package binding

import (
	"fmt"
	"unicode/utf8"
)

// SkippedEntry is an entry of the artifact directory the sidecar does not
// upload by policy (a symlink, a FIFO, a socket, a device), with why. It
// travels in heartbeats and the finishing frame so the binding names it: a
// log line alone is lost with the pod.
type SkippedEntry struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Bounds of the skipped entries a frame carries.
const (
	MaxReportedSkipped     = 5
	MaxSkippedReasonLength = 256
)

// String is the entry as the binding shows it.
func (e SkippedEntry) String() string { return e.Path + ": " + e.Reason }

func checkSkipped(list []SkippedEntry, count int) error {
	switch {
	case len(list) > MaxReportedSkipped:
		return fmt.Errorf("%d skipped entries, at most %d", len(list), MaxReportedSkipped)
	case count < len(list):
		return fmt.Errorf("skippedCount %d below the %d entries listed", count, len(list))
	}
	for _, e := range list {
		switch {
		case e.Path == "" || len(e.Path) > MaxReportedPathLength:
			return fmt.Errorf("skipped path of %d bytes (1..%d)", len(e.Path), MaxReportedPathLength)
		case len(e.Reason) > MaxSkippedReasonLength:
			return fmt.Errorf("skipped reason longer than %d bytes", MaxSkippedReasonLength)
		case !utf8.ValidString(e.Path) || !utf8.ValidString(e.Reason):
			return fmt.Errorf("skipped entry is not valid UTF-8")
		}
	}
	return nil
}

// BoundSkipped keeps the first entries that fit the protocol's bounds (a
// path too long to report is left out, a reason cut) and returns them with
// the count of all.
func BoundSkipped(all []SkippedEntry) ([]SkippedEntry, int) {
	var out []SkippedEntry
	for _, e := range all {
		if len(out) == MaxReportedSkipped {
			break
		}
		if e.Path == "" || len(e.Path) > MaxReportedPathLength || !utf8.ValidString(e.Path) {
			continue
		}
		r := e.Reason
		if !utf8.ValidString(r) {
			r = "(reason not valid UTF-8)"
		}
		for len(r) > MaxSkippedReasonLength {
			_, size := utf8.DecodeLastRuneInString(r)
			r = r[:len(r)-size]
		}
		out = append(out, SkippedEntry{Path: e.Path, Reason: r})
	}
	return out, len(all)
}
