package artifacts

import "fmt"

// maxPendingEvents bounds the paths the watcher holds between two Takes
// (about 100 bytes each); past it, events count as lost (a rescan).
const maxPendingEvents = 8192

// Sync modes, as Syncer.Mode reports them.
const (
	// ModeEvents: a file is uploaded when the trainer closes it after
	// writing or renames it into place (inotify); the settle rule still
	// takes files never closed.
	ModeEvents = "events"
	// ModeSettle: a file is uploaded once its size and mtime have been
	// unchanged for the settle time (file events off or unavailable).
	ModeSettle = "settle"
)

// eventsUnavailableError says why file events cannot be used, and which
// per-uid inotify limit ran out, if one did.
type eventsUnavailableError struct {
	reason string
	limit  string // sysctl name, "" when no limit is at fault
}

func (e *eventsUnavailableError) Error() string {
	if e.limit == "" {
		return "file events unavailable: " + e.reason
	}
	return fmt.Sprintf("file events unavailable: %s: the per-user inotify limit %s is used up "+
		"(shared by every process of this uid on the node, other sidecars included); raise it on the node", e.reason, e.limit)
}
