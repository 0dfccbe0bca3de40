package uploadsweep

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// The sweep's deadline: from the binding once it ended (recorded the first
// time as now + window), from memory once the binding is gone, never while a
// binding may still commit, and nothing more once every ended binding
// recorded its last sweep.
func TestPlanSweep(t *testing.T) {
	now := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	const window = 7 * time.Minute
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(d)) }
	binding := func(phase tetherv1.WorkerBindingPhase, du *tetherv1.DirectUploadsStatus) tetherv1.WorkerBinding {
		return tetherv1.WorkerBinding{Status: tetherv1.WorkerBindingStatus{Phase: phase, DirectUploads: du}}
	}
	deleting := binding(tetherv1.PhaseRunning, nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Second)}
	swept := at(-time.Minute)
	goneAt := now.Add(3 * time.Minute)

	for _, tc := range []struct {
		name     string
		bindings []tetherv1.WorkerBinding
		known    bool
		action   sweepAction
		deadline time.Time
		record   int
	}{
		{name: "running: its uploads may still be committed", action: sweepNone,
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseRunning, nil)}},
		{name: "promoting: not ended yet", action: sweepNone,
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseFinishing, nil)}},
		{name: "a resubmission runs beside an ended binding", action: sweepNone, known: true,
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseSucceeded, nil), binding(tetherv1.PhaseRunning, nil)}},
		{name: "just ended: the deadline is recorded as now + window", action: sweepEnded, deadline: now.Add(window), record: 1,
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseSucceeded, nil)}},
		{name: "ended: the recorded deadline, after a restart too", action: sweepEnded, deadline: now.Add(2 * time.Minute),
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseFailed, &tetherv1.DirectUploadsStatus{ExpireTime: at(2 * time.Minute)})}},
		{name: "deadline passed, last sweep not recorded: swept once more", action: sweepEnded, deadline: now.Add(-time.Minute),
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseSucceeded, &tetherv1.DirectUploadsStatus{ExpireTime: at(-time.Minute)})}},
		{name: "last sweep recorded: never again", action: sweepNone,
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseSucceeded, &tetherv1.DirectUploadsStatus{ExpireTime: at(-2 * time.Minute), SweptTime: &swept})}},
		{name: "an ended binding beside a deleted one of the same id: the later deadline", action: sweepEnded, known: true, deadline: goneAt,
			bindings: []tetherv1.WorkerBinding{binding(tetherv1.PhaseSucceeded, &tetherv1.DirectUploadsStatus{ExpireTime: at(time.Minute)})}},
		{name: "deleted, first seen now: now + window", action: sweepGone, deadline: now.Add(window),
			bindings: []tetherv1.WorkerBinding{deleting}},
		{name: "gone, deadline in memory", action: sweepGone, known: true, deadline: goneAt},
		{name: "gone, after a restart: now + window", action: sweepGone, deadline: now.Add(window)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planSweep(tc.bindings, now, window, goneAt, tc.known)
			if p.action != tc.action || !p.deadline.Equal(tc.deadline) || len(p.record) != tc.record {
				t.Fatalf("plan: action %d, deadline %s, %d to record; want %d, %s, %d",
					p.action, p.deadline, len(p.record), tc.action, tc.deadline, tc.record)
			}
		})
	}
}
