package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

// stallRun is one running job the controller reconciles now and then while
// its binding server records heartbeats (with or without a new step).
type stallRun struct {
	t      *testing.T
	wb     *tetherv1.WorkerBinding
	events []Event
}

func newStallRun(t *testing.T, stallAfter time.Duration) *stallRun {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
	wb.Spec.Settings = RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll,
		StallAfter: stallAfter})
	Initial(&wb.Status)
	r := &stallRun{t: t, wb: wb}
	r.reconcile(1)
	register(0, "a")(&wb.Status, at(1))
	return r
}

// beat is node 0's heartbeat at second s reporting step.
func (r *stallRun) beat(s int, step int64) {
	Heartbeat(&r.wb.Status, 0, "a", at(s), int64(s), &tetherv1.Progress{Step: &step})
}

// reconcile derives at second s and returns when the controller looks again.
func (r *stallRun) reconcile(s int) time.Duration {
	out := Derive(r.wb, Policy{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second},
		Observation{Now: at(s), Conditions: admitted, Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()}})
	r.wb.Status = out.Status
	r.events = append(append(r.events, out.Warnings...), out.Events...)
	return out.Requeue
}

func (r *stallRun) progressing() *metav1.Condition {
	return meta.FindStatusCondition(r.wb.Status.Conditions, tetherv1.ConditionProgressing)
}

func (r *stallRun) eventReasons() []string {
	var out []string
	for _, e := range r.events {
		if e.Reason == tetherv1.ReasonTrainerStalled || e.Reason == tetherv1.ReasonStepsResumed {
			out = append(out, e.Type+"/"+e.Reason)
		}
	}
	return out
}

func TestStallDeclaredOnceAndClearedWhenStepsResume(t *testing.T) {
	r := newStallRun(t, time.Minute)
	for s := 10; s <= 40; s += 10 {
		r.beat(s, int64(s/10))
	}
	// Step 4 at 40s: the window ends at 100s; the controller is asked back
	// just after it.
	if wait := r.reconcile(50); wait <= 0 || wait > 51*time.Second {
		t.Fatalf("requeue %s at 50s, want about 51s (window end at 100s)", wait)
	}
	if r.progressing() != nil && Stalled(&r.wb.Status) {
		t.Fatalf("stalled before the window: %+v", r.progressing())
	}
	// Heartbeats go on without a new step.
	for s := 50; s <= 110; s += 10 {
		r.beat(s, 4)
	}
	r.reconcile(101)
	c := r.progressing()
	if !Stalled(&r.wb.Status) || !strings.Contains(c.Message, "step 4 has not advanced for 1m1s") || !strings.Contains(c.Message, "stall window 1m0s") {
		t.Fatalf("at 101s: Progressing %+v, want False/TrainerStalled naming step 4 and the window", c)
	}
	// Another reconcile, more heartbeats at step 4: no second Warning.
	r.beat(120, 4)
	r.reconcile(121)
	if !StillStalled(&r.wb.Status) {
		t.Fatalf("a heartbeat without a step cleared the stall: %+v", r.progressing())
	}
	// The step moves: the next reconcile clears it.
	r.beat(130, 5)
	if StillStalled(&r.wb.Status) {
		t.Fatal("StillStalled after a new step")
	}
	r.reconcile(131)
	if c := r.progressing(); c.Status != metav1.ConditionTrue || c.Reason != tetherv1.ReasonHeartbeating || !c.LastTransitionTime.Time.Equal(at(131)) {
		t.Fatalf("after the step moved: Progressing %+v, want True with the phase's reason since 131s", c)
	}
	want := []string{corev1.EventTypeWarning + "/" + tetherv1.ReasonTrainerStalled, corev1.EventTypeNormal + "/" + tetherv1.ReasonStepsResumed}
	if got := r.eventReasons(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Events %v, want %v", got, want)
	}
}

func TestStallWindowDefaultsToTenMedianSteps(t *testing.T) {
	interval := func(d time.Duration) *tetherv1.Progress {
		return &tetherv1.Progress{StepInterval: &metav1.Duration{Duration: d}}
	}
	cases := []struct {
		name     string
		settings tetherv1.WorkerBindingSettings
		p        *tetherv1.Progress
		want     time.Duration
	}{
		{"no steps timed", tetherv1.WorkerBindingSettings{}, nil, MinStallWindow},
		{"fast steps: the floor", tetherv1.WorkerBindingSettings{}, interval(2 * time.Second), MinStallWindow},
		{"slow steps: ten of them", tetherv1.WorkerBindingSettings{}, interval(3 * time.Minute), 30 * time.Minute},
		{"the annotation wins", tetherv1.WorkerBindingSettings{StallAfter: &metav1.Duration{Duration: 2 * time.Minute}}, interval(3 * time.Minute), 2 * time.Minute},
	}
	for _, tc := range cases {
		if got := StallWindow(tc.settings, tc.p); got != tc.want {
			t.Errorf("%s: window %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestNoStallWhileSilentOrWithoutSteps(t *testing.T) {
	// No step reported: nothing to watch.
	r := newStallRun(t, time.Minute)
	for s := 10; s <= 200; s += 10 {
		Heartbeat(&r.wb.Status, 0, "a", at(s), int64(s), nil)
	}
	r.reconcile(200)
	if Stalled(&r.wb.Status) {
		t.Errorf("a trainer reporting no step was called stalled: %+v", r.progressing())
	}
	// Heartbeats lost: HeartbeatLost says so, not a stall.
	r = newStallRun(t, time.Minute)
	r.beat(10, 1)
	r.reconcile(200)
	if r.wb.Status.Reason != tetherv1.ReasonHeartbeatLost || Stalled(&r.wb.Status) {
		t.Errorf("silent node: %s/%s, Progressing %+v; want HeartbeatLost and no stall", r.wb.Status.Phase, r.wb.Status.Reason, r.progressing())
	}
}

func TestMergeProgressKeepsWhenTheStepLastMoved(t *testing.T) {
	step := func(n int64) *tetherv1.Progress { return &tetherv1.Progress{Step: &n, Loss: "0.5"} }
	p := MergeProgress(nil, step(1), at(10))
	p = MergeProgress(p, step(1), at(20))
	if !p.LastStepTime.Time.Equal(at(10)) {
		t.Fatalf("same step: lastStepTime %s, want %s", p.LastStepTime, at(10))
	}
	p.StepInterval = &metav1.Duration{Duration: time.Second}
	p = MergeProgress(p, step(2), at(30))
	if !p.LastStepTime.Time.Equal(at(30)) || p.StepInterval == nil || p.StepInterval.Duration != time.Second {
		t.Fatalf("new step: %+v, want lastStepTime %s and the interval kept", p, at(30))
	}
	// A restarted trainer resuming from an earlier checkpoint moves too.
	if p = MergeProgress(p, step(1), at(40)); !p.LastStepTime.Time.Equal(at(40)) {
		t.Fatalf("step back: lastStepTime %s, want %s", p.LastStepTime, at(40))
	}
	// Progress without a step keeps the last step's time.
	if p = MergeProgress(p, &tetherv1.Progress{Loss: "0.1"}, at(50)); p.LastStepTime == nil || !p.LastStepTime.Time.Equal(at(40)) {
		t.Fatalf("no step: lastStepTime %v, want %s", p.LastStepTime, at(40))
	}
}

func TestCheckpointReportedKeepsTheNewest(t *testing.T) {
	r := newStallRun(t, 0)
	st := &r.wb.Status
	cp := func(path string, step int64, s int) *tetherv1.CheckpointStatus {
		return &tetherv1.CheckpointStatus{Path: path, Step: step, Time: metav1.NewTime(at(s)), Files: 3, Bytes: 30}
	}
	if !CheckpointReported(st, 0, "a", cp("checkpoint-100/", 100, 10)) || st.LastCheckpoint.Step != 100 {
		t.Fatalf("first checkpoint not recorded: %+v", st.LastCheckpoint)
	}
	if CheckpointReported(st, 0, "a", cp("checkpoint-100/", 100, 10)) {
		t.Error("the same report changed the binding")
	}
	if CheckpointReported(st, 0, "a", cp("checkpoint-50/", 50, 5)) || st.LastCheckpoint.Step != 100 {
		t.Errorf("an older report replaced the newer: %+v", st.LastCheckpoint)
	}
	if CheckpointReported(st, 1, "b", cp("checkpoint-200/", 200, 20)) || CheckpointReported(st, 0, "other-pod", cp("checkpoint-200/", 200, 20)) {
		t.Error("a report of another node or pod was recorded")
	}
	// A trainer restarted from scratch: a later checkpoint at a lower step.
	if !CheckpointReported(st, 0, "a", cp("checkpoint-20/", 20, 30)) || st.LastCheckpoint.Path != "checkpoint-20/" {
		t.Errorf("a later checkpoint at a lower step was not recorded: %+v", st.LastCheckpoint)
	}
}
