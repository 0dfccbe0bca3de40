package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// The transitions Derive makes in one reconcile that the histories
// (derive_test.go) do not reach, each from a given status and
// observation: the admission phases, pods that cannot be created, the
// replicas' Leases, the reads Derive asks for, and final phases the binding
// server wrote. Together they cover every phase and reason the e2e suite
// waits for.
func TestDeriveTransitions(t *testing.T) {
	lease := func(renewed, expires int) map[string]ReplicaLease {
		return map[string]ReplicaLease{"replica-a": {Found: true, Renewed: at(renewed), Expires: at(expires)}}
	}
	running := func(st *tetherv1.WorkerBindingStatus, _ time.Time) {
		Initial(st)
		register(0, "a")(st, at(1))
		SessionHeld(st, 0, "a", "replica-a")
	}
	for _, tc := range []struct {
		name   string
		policy Policy
		start  func(*tetherv1.WorkerBindingStatus, time.Time) // the status before (nil: a new binding's)
		obs    Observation
		// reads answers what the first Derive asked for, before deriving again.
		reads func(*Observation)

		phase              tetherv1.WorkerBindingPhase
		reason, messageHas string
		requeue            time.Duration
		want               Wants
		conditions         map[string]metav1.ConditionStatus
		warned             bool // a Warning is announced at once
	}{{
		name:  "a new binding: Pending/TokenIssued, no pod yet; FailedCreate looked for at 5 s of age",
		obs:   Observation{Now: at(1), Conditions: admitted},
		phase: tetherv1.PhasePending, reason: tetherv1.ReasonTokenIssued, requeue: 4 * time.Second,
		conditions: map[string]metav1.ConditionStatus{tetherv1.ConditionTokenIssued: metav1.ConditionTrue, tetherv1.ConditionPodsInjected: metav1.ConditionUnknown},
	}, {
		name:   "admitted, no pod at 20 s: the Jobs' FailedCreate Events are read, and say why: PodCreateFailed",
		policy: Policy{CreateFailuresRead: true},
		obs:    Observation{Now: at(20), Conditions: admitted},
		reads: func(o *Observation) {
			o.CreateFailureRead, o.CreateFailure = true, "Job tj-node-0 cannot create its pods (FailedCreate x3): quota exceeded"
		},
		phase: tetherv1.PhasePending, reason: tetherv1.ReasonPodCreateFailed, messageHas: "quota exceeded", requeue: 15 * time.Second,
	}, {
		name:  "suspended before its first attempt: Pending/Suspended",
		obs:   Observation{Now: at(1), Conditions: suspended},
		phase: tetherv1.PhasePending, reason: tetherv1.ReasonSuspended,
	}, {
		name: "admitted after a suspension: Pending/Admitted",
		start: func(st *tetherv1.WorkerBindingStatus, _ time.Time) {
			Initial(st)
			Suspended(st, "TrainJob suspended: x")
		},
		obs:   Observation{Now: at(10), Conditions: admitted, Pods: []corev1.Pod{}},
		phase: tetherv1.PhasePending, reason: tetherv1.ReasonAdmitted, requeue: 15 * time.Second,
	}, {
		name: "a pod without the sidecar: PodsInjected False",
		obs: Observation{Now: at(10), Conditions: admitted,
			Pods: []corev1.Pod{*testobj.MakeTrainerPod("tj", "ns").Name("tj-node-0-0-x").CompletionIndex("0").UID("x").Running(0).Obj()}},
		phase: tetherv1.PhasePending, reason: tetherv1.ReasonTokenIssued,
		conditions: map[string]metav1.ConditionStatus{tetherv1.ConditionPodsInjected: metav1.ConditionFalse}, warned: true,
	}, {
		name:  "the first injected pod: Pending/AttemptStarted",
		obs:   Observation{Now: at(2), Conditions: admitted, Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()}},
		phase: tetherv1.PhasePending, reason: tetherv1.ReasonAttemptStarted,
		conditions: map[string]metav1.ConditionStatus{tetherv1.ConditionPodsInjected: metav1.ConditionTrue},
	}, {
		name: "its sidecar registered, no heartbeat yet: Registered",
		start: func(st *tetherv1.WorkerBindingStatus, _ time.Time) {
			Initial(st)
			PodSeen(st, Pod{Rank: 0, Name: "a", UID: "a"}, true, at(1))
		},
		obs:   Observation{Now: at(2), Conditions: admitted, Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()}},
		phase: tetherv1.PhaseRegistered, reason: tetherv1.ReasonRegistered, requeue: 40 * time.Second,
	}, {
		name:  "the replica holding the session stopped renewing its Lease: the node is lost past the missed heartbeats",
		start: running,
		obs: Observation{Now: at(60), Conditions: admitted, Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()},
			Leases: &LeaseView{Trusted: true, Replicas: lease(15, 30)}},
		phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeatLost, messageHas: "stopped renewing its Lease",
	}, {
		name:  "a current Lease vouches for the node, however silent",
		start: running,
		obs: Observation{Now: at(60), Conditions: admitted, Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()},
			Leases: &LeaseView{Trusted: true, Replicas: lease(55, 70)}},
		phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating,
	}, {
		name:  "a stale view of the Leases judges nobody: looked at again once it is current",
		start: running,
		obs: Observation{Now: at(600), Conditions: admitted, Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()},
			Leases: &LeaseView{TrustWait: 3 * time.Second}},
		phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating, requeue: 3 * time.Second,
	}, {
		name:  "a replica's Lease that could not be read: read again in a second",
		start: running,
		obs: Observation{Now: at(600), Conditions: admitted, Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()},
			Leases: &LeaseView{Trusted: true, Replicas: map[string]ReplicaLease{}}},
		phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating, requeue: time.Second,
	}, {
		name:  "the TrainJob failed with no trainer exit seen: Failed/JobFailed",
		start: running,
		obs:   Observation{Now: at(30), Conditions: failed(29), Pods: []corev1.Pod{*tpod(0, "a", 1).Running(0).Obj()}},
		phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonJobFailed, messageHas: "BackoffLimitExceeded",
	}, {
		name: "cancelled by the orchestrator: Failed/Cancelled stays, whatever the TrainJob says after",
		start: func(st *tetherv1.WorkerBindingStatus, now time.Time) {
			running(st, now)
			Cancelled(st, "cancelled by the orchestrator (command c1)")
		},
		obs:   Observation{Now: at(40), Conditions: complete(39), Pods: []corev1.Pod{*tpod(0, "a", 1).Exited(143, at(38)).Obj()}},
		phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled,
	}, {
		name:   "after the grace, the store's copy of the missing manifest is read; verified, it completes the gate: promote",
		policy: Policy{ArtifactGrace: 30 * time.Second, StoreChecked: true},
		start:  running,
		obs:    Observation{Now: at(70), Conditions: complete(30), Pods: []corev1.Pod{*tpod(0, "a", 1).Exited(0, at(29)).Obj()}},
		reads: func(o *Observation) {
			o.StoredManifests = map[int32]StoredManifest{0: {PodUID: "a", Artifacts: tetherv1.NodeArtifacts{Manifest: "job/manifest.json", Verified: true, Files: 1}}}
		},
		phase: tetherv1.PhaseFinishing, reason: tetherv1.ReasonPromotingArtifacts, want: Wants{Promote: true},
	}, {
		name:   "after the grace, no stored manifest either: Failed/ArtifactsIncomplete",
		policy: Policy{ArtifactGrace: 30 * time.Second, StoreChecked: true},
		start:  running,
		obs:    Observation{Now: at(70), Conditions: complete(30), Pods: []corev1.Pod{*tpod(0, "a", 1).Exited(0, at(29)).Obj()}},
		reads:  func(o *Observation) { o.StoredManifests = map[int32]StoredManifest{} },
		phase:  tetherv1.PhaseFailed, reason: tetherv1.ReasonArtifactsIncomplete,
	}, {
		name:   "within the grace: awaiting artifacts, looked at again when it ends",
		policy: Policy{ArtifactGrace: 30 * time.Second, StoreChecked: true},
		start:  running,
		obs:    Observation{Now: at(40), Conditions: complete(30), Pods: []corev1.Pod{*tpod(0, "a", 1).Exited(0, at(29)).Obj()}},
		phase:  tetherv1.PhaseFinishing, reason: tetherv1.ReasonAwaitingArtifacts, requeue: 20 * time.Second,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", CreationTimestamp: metav1.NewTime(h0)}}
			wb.Spec.TokenSecretName = "tj-tether-token"
			wb.Spec.Settings = RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
			wb.Status.NodeCount = 1
			if tc.start != nil {
				tc.start(&wb.Status, tc.obs.Now)
			}
			p := tc.policy
			p.StatusInterval, p.MissedHeartbeats = 10*time.Second, 3
			before := wb.Status.DeepCopy()
			out := Derive(wb, p, tc.obs)
			if tc.reads != nil {
				if !out.Want.Provisional() {
					t.Fatalf("Derive asked for no read: %+v", out.Want)
				}
				tc.reads(&tc.obs)
				out = Derive(wb, p, tc.obs)
			}
			if out.Want.Provisional() {
				t.Fatalf("Derive still asks for reads: %+v", out.Want)
			}
			st := &out.Status
			if st.Phase != tc.phase || st.Reason != tc.reason || !strings.Contains(st.Message, tc.messageHas) {
				t.Errorf("%s/%s (%q), want %s/%s with %q", st.Phase, st.Reason, st.Message, tc.phase, tc.reason, tc.messageHas)
			}
			if out.Requeue != tc.requeue {
				t.Errorf("requeue %s, want %s", out.Requeue, tc.requeue)
			}
			if out.Want.Promote != tc.want.Promote {
				t.Errorf("promote %v, want %v", out.Want.Promote, tc.want.Promote)
			}
			for typ, want := range tc.conditions {
				if c := findCondition(st, typ); c.Status != want {
					t.Errorf("condition %s %q, want %q", typ, c.Status, want)
				}
			}
			if warned := len(out.Warnings) > 0; warned != tc.warned {
				t.Errorf("warnings %v, want any: %v", out.Warnings, tc.warned)
			}
			if !equalStatusForTest(before, &wb.Status) {
				t.Error("Derive changed the binding it was given")
			}
		})
	}
}

func equalStatusForTest(a, b *tetherv1.WorkerBindingStatus) bool {
	return a.Phase == b.Phase && a.Reason == b.Reason && a.Message == b.Message && len(a.Conditions) == len(b.Conditions) && len(a.Nodes) == len(b.Nodes)
}
