package lifecycle

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// Pod is a trainer pod as the lifecycle rules see it.
type Pod struct {
	Rank     int32
	Name     string
	UID      string
	NodeName string
	// RestartAttempt is the JobSet restart attempt that created it.
	RestartAttempt int32
}

// Node returns the entry of rank, or nil.
func Node(st *tetherv1.WorkerBindingStatus, rank int32) *tetherv1.NodeStatus {
	for i := range st.Nodes {
		if st.Nodes[i].Rank == rank {
			return &st.Nodes[i]
		}
	}
	return nil
}

// node returns the entry of rank, adding it in rank order if needed; nil
// when rank is outside [0, MaxBoundNodes).
func node(st *tetherv1.WorkerBindingStatus, rank int32) *tetherv1.NodeStatus {
	if n := Node(st, rank); n != nil {
		return n
	}
	if rank < 0 || rank >= binding.MaxBoundNodes || len(st.Nodes) >= binding.MaxBoundNodes {
		return nil
	}
	st.Nodes = append(st.Nodes, tetherv1.NodeStatus{Rank: rank})
	sort.Slice(st.Nodes, func(a, b int) bool { return st.Nodes[a].Rank < st.Nodes[b].Rank })
	return Node(st, rank)
}

// SetNodeCount records how many nodes are bound and gives each an entry.
func SetNodeCount(st *tetherv1.WorkerBindingStatus, n int) bool {
	n = min(n, binding.MaxBoundNodes)
	if n <= 0 || int(st.NodeCount) == n {
		return false
	}
	st.NodeCount = int32(n)
	for r := range n {
		node(st, int32(r))
	}
	return true
}

// resetNodes forgets every node's pod for a new attempt of the whole job
// (re-admission, JobSet restart); exit history is kept.
func resetNodes(st *tetherv1.WorkerBindingStatus) {
	for i := range st.Nodes {
		st.Nodes[i] = tetherv1.NodeStatus{Rank: st.Nodes[i].Rank, LastExit: st.Nodes[i].LastExit}
	}
	st.Worker = nil
	aggregateArtifacts(st)
}

// startAttempt numbers the next attempt (or the one after several missed
// in-place restarts: by adds up to 1+more).
func startAttempt(st *tetherv1.WorkerBindingStatus, by string, rank *int32, count int32, now time.Time) {
	t := metav1.NewTime(now)
	st.Attempt += count
	st.AttemptStartedBy, st.AttemptStartTime, st.AttemptNode = by, &t, rank
}

// InPlaceOf names, for the Event of an attempt a replacement pod (uid)
// starts, the pod it takes node n from: ", in place of pod <name> on node
// <node>", or "" when n has no other pod. A pod lost with its node never
// exits, and its silence may not be HeartbeatLost yet when the replacement
// comes: this is where the loss shows.
func InPlaceOf(n *tetherv1.NodeStatus, uid string) string {
	if n == nil || n.PodName == "" || n.PodUID == uid {
		return ""
	}
	s := ", in place of pod " + n.PodName
	if n.NodeName != "" {
		s += " on node " + n.NodeName
	}
	return s
}

// PodSeen records a trainer pod of the job: registered is true when its
// sidecar registered (the binding server), false when the controller saw it
// in the pod list. The pod of an attempt's first sight starts the attempt;
// a newer JobSet restart attempt starts one for the whole job; another pod
// of a rank that had one (a replacement) starts one for that node. A pod of
// an older JobSet restart attempt changes nothing, and so does any pod while
// the binding is final or Cancelling, except that a pod a Failed/Cancelled
// binding has not seen resumes it (cancel.go). It reports whether anything
// changed and, when an attempt started, what started it.
func PodSeen(st *tetherv1.WorkerBindingStatus, p Pod, registered bool, now time.Time) (changed bool, started string) {
	if p.RestartAttempt < st.JobSetRestartAttempt {
		return false, ""
	}
	resumed := resumeCancelled(st, p.UID)
	if IsFinal(st.Phase) || Cancelling(st) {
		return resumed, ""
	}
	switch {
	case st.Attempt == 0:
		started = tetherv1.AttemptAdmission
		startAttempt(st, started, nil, 1, now)
	case st.Phase == tetherv1.PhasePending && st.Reason == tetherv1.ReasonPreempted:
		started = tetherv1.AttemptReadmission
		startAttempt(st, started, nil, 1, now)
		resetNodes(st)
	case p.RestartAttempt > st.JobSetRestartAttempt:
		started = tetherv1.AttemptJobSetRestart
		startAttempt(st, started, nil, 1, now)
		resetNodes(st)
	}
	if started != "" {
		changed = true
		st.JobSetRestartAttempt = p.RestartAttempt
		// Every node starts over (or it is the first start): the binding
		// waits for the attempt's sidecars, whatever it showed before.
		if st.Phase == tetherv1.PhasePending || started != tetherv1.AttemptAdmission {
			set(st, tetherv1.PhasePending, tetherv1.ReasonAttemptStarted,
				fmt.Sprintf("attempt %d started (%s); waiting for the sidecar to register", st.Attempt, started))
		}
		meta.RemoveStatusCondition(&st.Conditions, tetherv1.ConditionHeartbeatLost)
	}
	n := node(st, p.Rank)
	if n == nil {
		return changed, started
	}
	if n.PodUID != "" && n.PodUID != p.UID {
		if started == "" {
			started = tetherv1.AttemptPodReplaced
			rank := p.Rank
			startAttempt(st, started, &rank, 1, now)
		}
		*n = tetherv1.NodeStatus{Rank: p.Rank, LastExit: n.LastExit}
		changed = true
	}
	if n.PodUID != p.UID || n.PodName != p.Name {
		n.PodUID, n.PodName = p.UID, p.Name
		changed = true
	}
	if p.NodeName != "" && n.NodeName != p.NodeName {
		n.NodeName = p.NodeName
		changed = true
	}
	if registered && n.RegisteredTime == nil {
		t := metav1.NewTime(now)
		n.RegisteredTime = &t
		changed = true
	}
	if p.Rank == 0 && n.RegisteredTime != nil && (st.Worker == nil || st.Worker.PodUID != p.UID) {
		st.Worker = &tetherv1.WorkerStatus{PodName: p.Name, PodUID: p.UID, NodeName: n.NodeName, RegisteredTime: *n.RegisteredTime}
		changed = true
	}
	aggregateArtifacts(st)
	return derive(st) || changed, started
}

// current returns rank's entry if podUID is its pod in this attempt.
func current(st *tetherv1.WorkerBindingStatus, rank int32, podUID string) *tetherv1.NodeStatus {
	n := Node(st, rank)
	if n == nil || n.PodUID == "" || n.PodUID != podUID {
		return nil
	}
	return n
}

// Heartbeat records node rank's heartbeat (at, seq, progress) from pod
// podUID and clears its HeartbeatLost. Node 0's progress and sequence are
// the binding's. A heartbeat from a pod that is not the node's in this
// attempt (a preempted pod still talking) is ignored. It reports whether
// anything changed.
func Heartbeat(st *tetherv1.WorkerBindingStatus, rank int32, podUID string, at time.Time, seq int64, progress *tetherv1.Progress) bool {
	if IsFinal(st.Phase) {
		return false
	}
	n := current(st, rank, podUID)
	if n == nil || n.RegisteredTime == nil {
		return false
	}
	t := metav1.NewTime(at)
	n.LastHeartbeatTime = &t
	n.LastSeq = max(n.LastSeq, seq)
	if st.LastHeartbeatTime == nil || at.After(st.LastHeartbeatTime.Time) {
		st.LastHeartbeatTime = &t
	}
	if rank == 0 {
		st.LastSeq = max(st.LastSeq, seq)
		if progress != nil {
			st.Progress = MergeProgress(st.Progress, progress, at)
		}
	}
	if n.HeartbeatLost {
		n.HeartbeatLost = false
		lostCondition(st, -1, "")
	}
	derive(st)
	return true
}

// SessionHeld records that replica (the name of its Lease, "" for a
// replica without one) holds the session of node rank's pod podUID. It
// reports whether anything changed.
func SessionHeld(st *tetherv1.WorkerBindingStatus, rank int32, podUID, replica string) bool {
	if IsFinal(st.Phase) {
		return false
	}
	n := current(st, rank, podUID)
	if n == nil || n.SessionReplica == replica {
		return false
	}
	n.SessionReplica = replica
	return true
}

// HeldElsewhere reports whether node rank's session is recorded as held by a
// replica other than replica: that replica heard from the worker last.
func HeldElsewhere(st *tetherv1.WorkerBindingStatus, rank int32, replica string) bool {
	n := Node(st, rank)
	return n != nil && n.SessionReplica != "" && n.SessionReplica != replica
}

// HeartbeatLost marks node rank's worker silent; the condition names every
// silent node (msg says why for this one). A node whose sidecar reported
// its pod terminating is not: its session ends with the pod, and the
// controller judges the rest from the pod and the TrainJob (a binding kept
// Finishing while the leader was away went back to Running/HeartbeatLost,
// e2e scenario 4).
func HeartbeatLost(st *tetherv1.WorkerBindingStatus, rank int32, msg string) bool {
	if IsFinal(st.Phase) || held(st) {
		return false
	}
	n := Node(st, rank)
	if n == nil || n.PodUID == "" || n.RegisteredTime == nil || n.HeartbeatLost || n.Terminating {
		return false
	}
	n.HeartbeatLost = true
	lostCondition(st, rank, msg)
	derive(st)
	return true
}

// lostCondition sets HeartbeatLost from the nodes: True naming each silent
// node (at most five; why is the cause for node rank, the others say since
// when they are silent), False once none is.
func lostCondition(st *tetherv1.WorkerBindingStatus, rank int32, why string) {
	var lost []string
	count := 0
	for i := range st.Nodes {
		n := &st.Nodes[i]
		if !n.HeartbeatLost {
			continue
		}
		count++
		if len(lost) == 5 {
			continue
		}
		cause := why
		if n.Rank != rank || cause == "" {
			since := n.RegisteredTime
			if n.LastHeartbeatTime != nil {
				since = n.LastHeartbeatTime
			}
			cause = "silent since " + since.UTC().Format(time.RFC3339)
		}
		lost = append(lost, NodeName(st, n)+": "+cause)
	}
	c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionHeartbeatLost)
	switch {
	case count > 0:
		msg := strings.Join(lost, "; ")
		if count > len(lost) {
			msg += fmt.Sprintf("; and %d more nodes", count-len(lost))
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tetherv1.ConditionHeartbeatLost, Status: metav1.ConditionTrue,
			Reason: tetherv1.ReasonHeartbeatLost, Message: msg})
	case c != nil && c.Status == metav1.ConditionTrue:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tetherv1.ConditionHeartbeatLost, Status: metav1.ConditionFalse,
			Reason: tetherv1.ReasonHeartbeatResumed, Message: "heartbeats resumed"})
	}
}

// NodeName names a node for messages: "node 2 (pod p on n)", or for a
// single-node job "pod p".
func NodeName(st *tetherv1.WorkerBindingStatus, n *tetherv1.NodeStatus) string {
	where := "pod " + n.PodName
	if n.NodeName != "" {
		where += " on " + n.NodeName
	}
	if st.NodeCount <= 1 {
		return where
	}
	return fmt.Sprintf("node %d (%s)", n.Rank, where)
}

// IsHeartbeatLost reports whether the HeartbeatLost condition is True.
func IsHeartbeatLost(st *tetherv1.WorkerBindingStatus) bool {
	return meta.IsStatusConditionTrue(st.Conditions, tetherv1.ConditionHeartbeatLost)
}

// Finishing: node rank's sidecar (in pod podUID) reported its pod
// terminating. The binding is Finishing once every node's pod is.
func Finishing(st *tetherv1.WorkerBindingStatus, rank int32, podUID, reason string) bool {
	n := current(st, rank, podUID)
	if IsFinal(st.Phase) || n == nil || n.Terminating {
		return false
	}
	n.Terminating = true
	derive(st)
	return true
}
