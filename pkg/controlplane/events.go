package controlplane

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"

	"github.com/tether-dev/tether/pkg/binding"
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

// eventSpamBurst is how many Events of one reason and type about one object
// the recorder sends before it throttles them to one per five minutes
// (client-go's refill). One per bound node fits, with client-go's own burst
// on top: a 256-node job's Injected Events all go out.
const eventSpamBurst = binding.MaxBoundNodes + 25

// eventCorrelatorOptions are client-go's defaults but for the spam filter,
// which keys on the reason too, with eventSpamBurst.
//
// Why: client-go's filter keys on the object and the Event's type alone,
// with a burst of 25, and Tether's Events are about the TrainJob: a job's
// per-pod and per-node Events (Injected, Registered, AttemptStarted) would
// spend the TrainJob's whole budget, and every Normal Event after the 25th
// (TrainerSucceeded, Succeeded) would be dropped for minutes, unseen. With
// the reason in the key a runaway reason is still throttled, alone. Similar
// Events past 10 in 10 minutes are still combined into one (client-go's
// aggregator), so a big job's Injected Events cost 10 creates and then
// patches of one Event.
func eventCorrelatorOptions() record.CorrelatorOptions {
	return record.CorrelatorOptions{BurstSize: eventSpamBurst, SpamKeyFunc: eventSpamKey}
}

// eventSpamKey is client-go's spam key (source, object, type) and the reason.
func eventSpamKey(e *corev1.Event) string {
	return strings.Join([]string{e.Source.Component, e.Source.Host, e.InvolvedObject.Kind, e.InvolvedObject.Namespace,
		e.InvolvedObject.Name, string(e.InvolvedObject.UID), e.InvolvedObject.APIVersion, e.Type, e.Reason}, "\x00")
}

// newEventBroadcaster is Tether's core/v1 Event broadcaster, with
// eventCorrelatorOptions. ControlPlane.Start stops it.
func newEventBroadcaster() record.EventBroadcaster {
	return record.NewBroadcaster(record.WithCorrelatorOptions(eventCorrelatorOptions()))
}

// startEventRecorder starts b sending to the API server through a
// queuedEventSink, and logging at V(1) when that is on, and returns Tether's
// recorder on it and the sink.
//
// Why not the manager's recorder with b in Options.EventBroadcaster: the
// manager and its cluster each make a recorder provider from that option,
// and each starts b recording to a sink of its own once it records (the
// manager's on the leader election), so every Event after the election was
// sent twice and the second create refused as AlreadyExists
// (kubernetes-sigs/controller-runtime#1576; 0.2 wasted creates per binding
// in a burst, test/performance/controller). The manager keeps a broadcaster of its own for
// its election Events, and stops it.
func startEventRecorder(b record.EventBroadcaster, cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, log logr.Logger) (eventRecorder, *queuedEventSink, error) {
	cs, err := corev1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return eventRecorder{}, nil, fmt.Errorf("creating the Events client: %w", err)
	}
	sink := newQueuedEventSink(&corev1client.EventSinkImpl{Interface: cs.Events("")}, log, eventSinkWorkers, eventSinkDepth)
	b.StartRecordingToSink(sink)
	if debug := log.V(1); debug.Enabled() {
		b.StartEventWatcher(func(e *corev1.Event) {
			debug.Info(e.Message, "type", e.Type, "object", e.InvolvedObject, "reason", e.Reason)
		})
	}
	return eventRecorder{b.NewRecorder(scheme, corev1.EventSource{Component: eventSource})}, sink, nil
}

// eventSource is the component Tether's Events name as their source.
const eventSource = "tether"

// eventShutdownTimeout bounds the Events' shutdown when the control plane
// stops; Events still queued then are lost, as with the manager's own.
const eventShutdownTimeout = 5 * time.Second

// shutdownEvents stops b, then sink (nil: none), together within
// eventShutdownTimeout.
func shutdownEvents(b record.EventBroadcaster, sink *queuedEventSink) {
	deadline := time.Now().Add(eventShutdownTimeout)
	done := make(chan struct{})
	go func() {
		b.Shutdown()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
	}
	if sink != nil {
		sink.stop(deadline)
	}
}
