package controlplane

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
)

// eventRecorder records Tether's Events through the core/v1 recorder, behind
// the events.k8s.io interface the packages take.
//
// Why not the events.k8s.io recorder: it folds every Event of the same
// object, type and reason into one series that keeps the first note, so a
// job's second TrainerExited, a later attempt's AttemptStarted or another
// node's HeartbeatLost would be shown with the first one's details (seen on
// the real node: the in-place restart's AttemptStarted counted into the
// admission's). The core/v1 correlator counts repeats of one message and
// keeps different messages apart (combining them, with the latest message,
// only past 10 similar Events in 10 minutes). It is the recorder Kueue,
// JobSet and Trainer use; controller-runtime marks it deprecated.
type eventRecorder struct{ r record.EventRecorder }

var _ events.EventRecorder = eventRecorder{}

// Eventf records an Event about regarding; related and action have no
// place in a core/v1 Event and are dropped (action is always "Bind").
func (e eventRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	e.r.Eventf(regarding, eventtype, reason, note, args...)
}
