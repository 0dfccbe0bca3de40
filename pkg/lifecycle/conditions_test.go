package lifecycle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

var allPhases = []tetherv1.WorkerBindingPhase{tetherv1.PhasePending, tetherv1.PhaseRegistered, tetherv1.PhaseRunning,
	tetherv1.PhaseFinishing, tetherv1.PhaseSucceeded, tetherv1.PhaseFailed}

// declaredReasons reads every Reason* string constant declared in api/v1alpha1
// and in this package from the source, so a reason added later (by any
// change) is in the tables below without editing them.
func declaredReasons(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, pattern := range []string{"../../api/v1alpha1/*.go", "*.go"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(parsed, func(n ast.Node) bool {
				spec, ok := n.(*ast.ValueSpec)
				if !ok {
					return true
				}
				for i, name := range spec.Names {
					if !strings.HasPrefix(name.Name, "Reason") || i >= len(spec.Values) {
						continue
					}
					if lit, ok := spec.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						seen[v] = true
					}
				}
				return true
			})
		}
	}
	reasons := make([]string, 0, len(seen))
	for r := range seen {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	// The reasons the phase machine sets must be among them, or the parse
	// above found nothing real.
	for _, r := range []string{tetherv1.ReasonHeartbeating, tetherv1.ReasonTrainerSucceeded, tetherv1.ReasonCancelled, ReasonTrainJobDeleted} {
		if !seen[r] {
			t.Fatalf("reason %s not found among the declared reasons %v", r, reasons)
		}
	}
	return reasons
}

// conditionReason is metav1.Condition's reason pattern (the CRD enforces it).
var conditionReason = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// statuses maps each outcome condition's type to its status.
func statuses(t *testing.T, conds []metav1.Condition) map[string]metav1.ConditionStatus {
	t.Helper()
	got := map[string]metav1.ConditionStatus{}
	for _, c := range conds {
		if _, dup := got[c.Type]; dup {
			t.Errorf("condition %s appears twice", c.Type)
		}
		got[c.Type] = c.Status
	}
	return got
}

// Every phase with every reason maps to one set of the six outcome
// conditions that agree with the phase and with each other, whatever
// conditions the status carried before.
func TestOutcomeConditionsForEveryPhaseAndReason(t *testing.T) {
	reasons := declaredReasons(t)
	tru, fals := metav1.ConditionTrue, metav1.ConditionFalse
	is := func(b bool) metav1.ConditionStatus {
		if b {
			return tru
		}
		return fals
	}
	// Conditions left by earlier writes: each other phase's set.
	var stale [][]metav1.Condition
	for _, p := range allPhases {
		st := &tetherv1.WorkerBindingStatus{Phase: p, Reason: tetherv1.ReasonRegistered, Message: "earlier"}
		SetOutcomeConditions(st, 1)
		stale = append(stale, st.Conditions)
	}
	for _, phase := range allPhases {
		for _, reason := range reasons {
			st := tetherv1.WorkerBindingStatus{Phase: phase, Reason: reason, Message: "why " + reason}
			got := OutcomeConditions(&st, ConditionSignals{}, 7)
			name := string(phase) + "/" + reason
			final := phase == tetherv1.PhaseSucceeded || phase == tetherv1.PhaseFailed
			held := reason == tetherv1.ReasonSuspended || reason == tetherv1.ReasonPodCreateFailed || reason == tetherv1.ReasonHeartbeatLost
			want := map[string]metav1.ConditionStatus{
				tetherv1.ConditionReady:       is(phase == tetherv1.PhaseRunning && reason == tetherv1.ReasonHeartbeating || phase == tetherv1.PhaseSucceeded),
				tetherv1.ConditionSucceeded:   is(phase == tetherv1.PhaseSucceeded),
				tetherv1.ConditionFailed:      is(phase == tetherv1.PhaseFailed),
				tetherv1.ConditionProgressing: is(!final && !held),
				tetherv1.ConditionReconciling: is(!final),
				tetherv1.ConditionStalled:     is(phase == tetherv1.PhaseFailed),
			}
			have := statuses(t, got)
			for _, typ := range tetherv1.OutcomeConditionTypes() {
				if _, ok := want[typ]; !ok {
					t.Fatalf("outcome condition %s has no expectation in this test", typ)
				}
			}
			if len(have) != len(want) {
				t.Errorf("%s: %d conditions %v, want the %d outcome conditions", name, len(have), have, len(want))
			}
			for typ, w := range want {
				if have[typ] != w {
					t.Errorf("%s: %s=%s, want %s", name, typ, have[typ], w)
				}
			}
			// The set agrees with itself: one outcome at most, kstatus's
			// pair exclusive, ready only while progressing or once succeeded.
			if have[tetherv1.ConditionSucceeded] == tru && have[tetherv1.ConditionFailed] == tru ||
				have[tetherv1.ConditionReconciling] == tru && have[tetherv1.ConditionStalled] == tru ||
				have[tetherv1.ConditionReady] == tru && have[tetherv1.ConditionProgressing] != tru && have[tetherv1.ConditionSucceeded] != tru ||
				have[tetherv1.ConditionProgressing] == tru && have[tetherv1.ConditionReconciling] != tru {
				t.Errorf("%s: inconsistent set %v", name, have)
			}
			for _, c := range got {
				if c.Reason != reason || c.Message != st.Message || c.ObservedGeneration != 7 || !conditionReason.MatchString(c.Reason) {
					t.Errorf("%s: %s has reason %q message %q generation %d, want the phase's (%q, %q) and 7", name, c.Type, c.Reason, c.Message, c.ObservedGeneration, reason, st.Message)
				}
			}
			// Whatever an earlier write left, the same set results.
			for _, before := range stale {
				s := st.DeepCopy()
				s.Conditions = append([]metav1.Condition(nil), before...)
				SetOutcomeConditions(s, 7)
				for _, w := range got {
					if c := meta.FindStatusCondition(s.Conditions, w.Type); c == nil || c.Status != w.Status || c.Reason != w.Reason || c.Message != w.Message {
						t.Errorf("%s over stale conditions: %s is %+v, want %s/%s", name, w.Type, c, w.Status, w.Reason)
					}
				}
				if SetOutcomeConditions(s, 7) {
					t.Errorf("%s: applying the conditions a second time changed them", name)
				}
			}
		}
	}
}

// A condition's LastTransitionTime moves only when its status flips; its
// reason, message and generation follow the phase in place.
func TestOutcomeConditionTransitionTimes(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseRunning, Reason: tetherv1.ReasonHeartbeating, Message: "worker is heartbeating"}
	if !SetOutcomeConditions(st, 1) {
		t.Fatal("no conditions set on a Running binding")
	}
	long := metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	for i := range st.Conditions {
		st.Conditions[i].LastTransitionTime = long
	}
	st.Reason, st.Message = tetherv1.ReasonHeartbeatLost, "node 0 silent for 30s"
	if !SetOutcomeConditions(st, 2) {
		t.Fatal("losing the heartbeat changed no condition")
	}
	for _, c := range st.Conditions {
		flipped := c.Type == tetherv1.ConditionReady || c.Type == tetherv1.ConditionProgressing
		if moved := !c.LastTransitionTime.Equal(&long); moved != flipped {
			t.Errorf("%s=%s: lastTransitionTime moved %v, want %v", c.Type, c.Status, moved, flipped)
		}
		if c.Reason != tetherv1.ReasonHeartbeatLost || c.Message != st.Message || c.ObservedGeneration != 2 {
			t.Errorf("%s: %s %q generation %d, want HeartbeatLost, the phase's message, 2", c.Type, c.Reason, c.Message, c.ObservedGeneration)
		}
	}
	if SetOutcomeConditions(&tetherv1.WorkerBindingStatus{}, 1) {
		t.Error("a binding without a phase got outcome conditions")
	}
}

// The stall hook: one signal turns a live binding's Progressing False with
// reason TrainerStalled, and nothing else.
func TestTrainerStalledSignalOnlyStopsProgressing(t *testing.T) {
	for _, st := range []tetherv1.WorkerBindingStatus{
		{Phase: tetherv1.PhaseRunning, Reason: tetherv1.ReasonHeartbeating, Message: "worker is heartbeating"},
		{Phase: tetherv1.PhaseSucceeded, Reason: tetherv1.ReasonTrainerSucceeded, Message: "done"},
	} {
		plain := OutcomeConditions(&st, ConditionSignals{}, 1)
		stalled := OutcomeConditions(&st, ConditionSignals{TrainerStalled: "step 1200 has not advanced for 30m"}, 1)
		for i := range plain {
			p, s := plain[i], stalled[i]
			live := st.Phase == tetherv1.PhaseRunning
			if p.Type == tetherv1.ConditionProgressing && live {
				if s.Status != metav1.ConditionFalse || s.Reason != tetherv1.ReasonTrainerStalled || s.Message != "step 1200 has not advanced for 30m" {
					t.Errorf("%s: stalled Progressing is %+v, want False/TrainerStalled", st.Phase, s)
				}
				continue
			}
			if p != s {
				t.Errorf("%s: the stall signal changed %s from %+v to %+v", st.Phase, p.Type, p, s)
			}
		}
	}
}

// kstatus (sigs.k8s.io/cli-utils, what Flux, Argo's kstatus-based checks
// and kpt read) sees a live binding as InProgress, a Succeeded one as
// Current and a Failed one as Failed, for every reason.
func TestKstatusReadsTheOutcome(t *testing.T) {
	for _, phase := range allPhases {
		for _, reason := range declaredReasons(t) {
			wb := &tetherv1.WorkerBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: tetherv1.GroupVersion.String(), Kind: "WorkerBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", Generation: 3},
				Status:     tetherv1.WorkerBindingStatus{Phase: phase, Reason: reason, Message: "m", ObservedGeneration: 3},
			}
			SetOutcomeConditions(&wb.Status, wb.Generation)
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wb)
			if err != nil {
				t.Fatal(err)
			}
			res, err := status.Compute(&unstructured.Unstructured{Object: obj})
			if err != nil {
				t.Fatalf("%s/%s: kstatus: %v", phase, reason, err)
			}
			want := status.InProgressStatus
			switch phase {
			case tetherv1.PhaseSucceeded:
				want = status.CurrentStatus
			case tetherv1.PhaseFailed:
				want = status.FailedStatus
			}
			if res.Status != want {
				t.Errorf("%s/%s: kstatus %s (%s), want %s", phase, reason, res.Status, res.Message, want)
			}
		}
	}
}
