package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

// answer is the binding server recording the nodes' answer to a command
// sent in the current attempt (state Sent: sent, no answer yet).
func answer(name, id string, state string) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, now time.Time) {
		t := metav1.NewTime(now)
		c := &tetherv1.CommandStatus{ID: id, Name: name, State: state, Time: &t, SentNodes: []int32{0}, Attempt: st.Attempt}
		switch state {
		case tetherv1.CommandAcknowledged:
			c.AckedNodes = []int32{0}
		case tetherv1.CommandFailed:
			c.Message = "uploading ckpt/step-8.pt: store unavailable"
		}
		st.LastCommand = c
	}
}

// TestCancelHistories: what the binding says of a cancel, decided from the
// pods the controller lists (a one-node job, pod "a" registered at 1 s).
func TestCancelHistories(t *testing.T) {
	running := step{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")}
	acked := answer(binding.CommandCancel, "c1", tetherv1.CommandAcknowledged)
	cases := []struct {
		name  string
		steps []step
		want  want
	}{{
		name: "cancel acknowledged while the trainer pod runs: Finishing/Cancelling",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
		},
		want: want{phase: tetherv1.PhaseFinishing, reason: tetherv1.ReasonCancelling, attempt: 1,
			messageHas: []string{"cancel c1 acknowledged", "1 trainer pod(s)"}},
	}, {
		name: "the stop suspends the job: still Cancelling while the pod is deleted, not Preempted",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
			{t: 12, pods: ps(tpod(0, "a", 1).Deleting(at(11)).Running(0)), conds: suspended},
		},
		want: want{phase: tetherv1.PhaseFinishing, reason: tetherv1.ReasonCancelling, attempt: 1},
	}, {
		name: "cancel acknowledged, then no trainer pod remains: Failed/Cancelled",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
			{t: 12, pods: ps(tpod(0, "a", 1).Deleting(at(11)).Running(0)), conds: suspended},
			{t: 14, pods: ps(), conds: suspended},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled, attempt: 1,
			messageHas: []string{"cancel c1 acknowledged: every node flushed", "no trainer pod remains"},
			events:     []string{tetherv1.ReasonHeartbeating, tetherv1.ReasonCancelling, tetherv1.ReasonCancelled}},
	}, {
		name: "an ended pod is no remaining pod: the trainer exited before the stop",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Exited(143, at(9)).Phase(corev1.PodFailed)), conds: admitted, server: acked},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled, attempt: 1, trainerExits: 1},
	}, {
		name: "the flush failed: the stop still follows, and the verdict says why the flush failed",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: answer(binding.CommandCancel, "c1", tetherv1.CommandFailed)},
			{t: 14, pods: ps(), conds: suspended},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled, messageHas: []string{"cancel c1 failed", "store unavailable"}},
	}, {
		name: "no answer before the orchestrator stopped the job (its wait timed out): Cancelled once the pods are gone",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: answer(binding.CommandCancel, "c1", tetherv1.CommandSent)},
			{t: 60, pods: ps(tpod(0, "a", 1).Deleting(at(59)).Running(0)), conds: suspended},
			{t: 62, pods: ps(), conds: suspended},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled, messageHas: []string{"not answered"}},
	}, {
		name: "a cancel sent, not answered yet, job running: the worker is still flushing, no Cancelling",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: answer(binding.CommandCancel, "c1", tetherv1.CommandSent)},
		},
		want: want{phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating},
	}, {
		name: "suspended by its owner, no cancel: Preempted, never Cancelled",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Deleting(at(9)).Running(0)), conds: suspended},
			{t: 14, pods: ps(), conds: suspended},
		},
		want: want{phase: tetherv1.PhasePending, reason: tetherv1.ReasonPreempted, attempt: 1},
	}, {
		name: "a flush acknowledged, then suspended by its owner: Preempted",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: answer(binding.CommandFlush, "f1", tetherv1.CommandAcknowledged)},
			{t: 12, pods: ps(), conds: suspended},
		},
		want: want{phase: tetherv1.PhasePending, reason: tetherv1.ReasonPreempted, attempt: 1},
	}, {
		name: "the TrainJob completes while Cancelling: the cancel's verdict stands",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
			{t: 20, pods: ps(tpod(0, "a", 1).Exited(0, at(19)).Phase(corev1.PodSucceeded)), conds: complete(19)},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled, trainerExits: 1},
	}, {
		name: "resumed after the cancel (Workload active again): the new pod starts attempt 2, which runs bound",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
			{t: 14, pods: ps(), conds: suspended},
			{t: 30, pods: ps(), conds: admitted},
			{t: 31, pods: ps(tpod(0, "b", 31).Running(0)), conds: admitted},
			{t: 33, pods: ps(tpod(0, "b", 31).Running(0)), conds: admitted, server: register(0, "b")},
		},
		want: want{phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating, attempt: 2, startedBy: tetherv1.AttemptReadmission,
			events: []string{tetherv1.ReasonHeartbeating, tetherv1.ReasonCancelling, tetherv1.ReasonCancelled, tetherv1.ReasonAttemptStarted, tetherv1.ReasonHeartbeating}},
	}, {
		name: "resumed within the second the cancel was answered: the cancel ends only the attempt it was sent in",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
			{t: 10, pods: ps(), conds: suspended},
			{t: 10, pods: ps(tpod(0, "b", 10).Running(0)), conds: admitted, server: register(0, "b")},
			{t: 11, pods: ps(tpod(0, "b", 10).Running(0)), conds: admitted},
		},
		want: want{phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating, attempt: 2, startedBy: tetherv1.AttemptReadmission},
	}, {
		name: "resumed: the new attempt's sidecar registers before the controller sees its pod",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
			{t: 14, pods: ps(), conds: suspended},
			{t: 31, server: register(0, "b")},
			{t: 33, pods: ps(tpod(0, "b", 31).Running(0)), conds: admitted},
		},
		want: want{phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating, attempt: 2, startedBy: tetherv1.AttemptReadmission},
	}, {
		name: "resumed, then cancelled again: the second cancel ends attempt 2",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: acked},
			{t: 14, pods: ps(), conds: suspended},
			{t: 31, pods: ps(tpod(0, "b", 31).Running(0)), conds: admitted, server: register(0, "b")},
			{t: 40, pods: ps(tpod(0, "b", 31).Running(0)), conds: admitted, server: answer(binding.CommandCancel, "c2", tetherv1.CommandAcknowledged)},
			{t: 44, pods: ps(), conds: suspended},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled, attempt: 2, messageHas: []string{"cancel c2"}},
	}, {
		name: "cancelled, the job unsuspended, but only the ended pod of the cancelled attempt is listed: still Cancelled",
		steps: []step{running,
			{t: 10, pods: ps(tpod(0, "a", 1).Exited(143, at(9)).Phase(corev1.PodFailed)), conds: admitted, server: acked},
			{t: 14, pods: ps(tpod(0, "a", 1).Exited(143, at(9)).Phase(corev1.PodFailed)), conds: admitted},
			{t: 16, pods: ps(tpod(0, "x", 15).Exited(143, at(15)).Phase(corev1.PodFailed)), conds: admitted},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonCancelled, attempt: 1, trainerExits: 1},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
			wb.Spec.Settings = RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
			Initial(&wb.Status)
			p := Policy{StatusInterval: 10 * time.Second, MissedHeartbeats: 3}
			var events []string
			for _, s := range tc.steps {
				now := at(s.t)
				before := wb.Status.DeepCopy()
				if s.server != nil {
					s.server(&wb.Status, now)
				}
				if s.pods != nil {
					pods := make([]corev1.Pod, len(s.pods))
					for i, p := range s.pods {
						pods[i] = *p.Obj()
					}
					o := Observation{Now: now, Conditions: s.conds, Pods: pods}
					if NeedsNodeCount(wb, pods) {
						o.NodeCount = 1
					}
					wb.Status = Derive(wb, p, o).Status
				}
				if Transitioned(before.Phase, before.Reason, &wb.Status) {
					events = append(events, wb.Status.Reason)
				}
			}
			checkStatus(t, &wb.Status, tc.want, events)
		})
	}
}

// TestResumingACancelledBindingDropsItsSweepRecord: the upload sweep
// recorded the cancelled binding's end; the resumed attempt's end needs its
// own deadline and sweep.
func TestResumingACancelledBindingDropsItsSweepRecord(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{}
	Initial(st)
	PodSeen(st, Pod{Rank: 0, Name: "a", UID: "a"}, true, at(1))
	Cancelled(st, "cancelled")
	swept := metav1.NewTime(at(20))
	st.DirectUploads = &tetherv1.DirectUploadsStatus{ExpireTime: swept, SweptTime: &swept}
	if changed, _ := PodSeen(st, Pod{Rank: 0, Name: "a", UID: "a"}, true, at(30)); changed || !Resumable(st) {
		t.Fatalf("the cancelled attempt's own pod reopened the binding: %s", Describe(st))
	}
	changed, started := PodSeen(st, Pod{Rank: 0, Name: "b", UID: "b"}, true, at(31))
	if !changed || started != tetherv1.AttemptReadmission || st.Attempt != 2 || IsFinal(st.Phase) {
		t.Fatalf("a new pod after the cancel: changed %v, started %q, attempt %d, %s; want attempt 2 by readmission", changed, started, st.Attempt, Describe(st))
	}
	if st.DirectUploads != nil {
		t.Errorf("the resumed binding keeps the cancelled attempt's sweep record %+v", st.DirectUploads)
	}
	if st.Phase != tetherv1.PhaseRegistered || !strings.Contains(st.Message, "pod b") {
		t.Errorf("after the resumed attempt's registration: %s %q, want Registered naming pod b", Describe(st), st.Message)
	}
}
