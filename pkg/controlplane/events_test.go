package controlplane

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/pkg/binding"
)

// jobEvent is an Event about one TrainJob, as Tether's recorder makes it.
func jobEvent(eventType, reason, message string) *corev1.Event {
	now := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "job.1", Namespace: "team"},
		InvolvedObject: corev1.ObjectReference{Kind: "TrainJob", APIVersion: "trainer.kubeflow.org/v1alpha1", Namespace: "team", Name: "job", UID: "uid-1"},
		Source:         corev1.EventSource{Component: "tether"},
		Type:           eventType, Reason: reason, Message: message,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
}

// correlate runs a big job's Events through client-go's correlator with
// opts: one Injected Event per node of binding.MaxBoundNodes and a few
// more, then the job's end. It returns whether the end was sent and how many
// Injected Events were.
func correlate(t *testing.T, opts record.CorrelatorOptions) (endSent bool, injectedSent int) {
	t.Helper()
	opts.Clock = clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	c := record.NewEventCorrelatorWithOptions(opts)
	for i := range binding.MaxBoundNodes + 40 {
		res, err := c.EventCorrelate(jobEvent(corev1.EventTypeNormal, "Injected", fmt.Sprintf("pod job-node-0-%d was created with the Tether sidecar", i)))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Skip {
			injectedSent++
		}
	}
	res, err := c.EventCorrelate(jobEvent(corev1.EventTypeNormal, "Succeeded", "every artifact verified"))
	if err != nil {
		t.Fatal(err)
	}
	return !res.Skip, injectedSent
}

func TestABigJobsEndEventIsNotDroppedAfterItsPodEvents(t *testing.T) {
	// client-go's defaults drop it: the reason this recorder has its own.
	if end, _ := correlate(t, record.CorrelatorOptions{}); end {
		t.Fatal("with client-go's default spam filter the Succeeded Event was sent after 296 Injected ones: the defaults changed, revisit eventCorrelatorOptions")
	}
	end, injected := correlate(t, eventCorrelatorOptions())
	if !end {
		t.Error("the Succeeded Event after a 256-node job's Injected Events was dropped")
	}
	if injected != eventSpamBurst {
		t.Errorf("%d Injected Events sent of %d, want the spam filter's burst, %d: one reason is still throttled alone", injected, binding.MaxBoundNodes+40, eventSpamBurst)
	}
}

func TestEventSpamKeyTellsReasonsAndObjectsApart(t *testing.T) {
	a := jobEvent(corev1.EventTypeNormal, "Injected", "x")
	otherJob := jobEvent(corev1.EventTypeNormal, "Injected", "x")
	otherJob.InvolvedObject.Name = "other"
	recreated := jobEvent(corev1.EventTypeNormal, "Injected", "x")
	recreated.InvolvedObject.UID = "uid-2"
	for _, b := range []*corev1.Event{
		jobEvent(corev1.EventTypeNormal, "Succeeded", "x"),
		jobEvent(corev1.EventTypeWarning, "Injected", "x"),
		otherJob,
		recreated,
	} {
		if eventSpamKey(a) == eventSpamKey(b) {
			t.Errorf("%s/%s %s/%s shares a spam key with %s/%s %s/%s", a.InvolvedObject.Name, a.InvolvedObject.UID, a.Type, a.Reason,
				b.InvolvedObject.Name, b.InvolvedObject.UID, b.Type, b.Reason)
		}
	}
	if b := jobEvent(corev1.EventTypeNormal, "Injected", "another message"); eventSpamKey(a) != eventSpamKey(b) {
		t.Error("two messages of one reason have different spam keys: a runaway reason would not be throttled")
	}
}
