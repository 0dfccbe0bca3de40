package lifecycle

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// The binding controller reconciles in three steps: it gathers every read
// into an Observation, Derive decides (the new status, the Events, the
// actions wanted), then the controller acts and writes. Derive is pure, so
// the phase machine is tested as a table of histories, and what the binding
// says is decided in one place.

// Observation is what one reconcile of a binding read.
type Observation struct {
	Now time.Time
	// Conditions are the TrainJob's.
	Conditions []metav1.Condition
	// Pods are the job's trainer pods.
	Pods []corev1.Pod
	// NodeCount is the JobSet's count of trainer nodes (0: not read, see
	// NeedsNodeCount).
	NodeCount int
	// Leases is the view of the binding-server replicas' Leases (nil: not
	// consulted).
	Leases *LeaseView
	// StoredManifests are the artifact store's verdicts on the manifests
	// Outcome.Want.StoredManifests named, by node (nil: not read; a node
	// absent: no manifest stored, or it could not be read).
	StoredManifests map[int32]StoredManifest
	// CreateFailure says why the trainer Jobs cannot create their pods
	// ("": no such Event), read when Outcome.Want.CreateFailure asked.
	CreateFailure     string
	CreateFailureRead bool
	// ListedPaths are the paths the verified manifests
	// Outcome.Want.ListedPaths named list (nil: not read), for the
	// required-outputs check.
	ListedPaths *ListedPaths
	// Retry is how soon reads that failed are tried again (0: none failed).
	Retry time.Duration
}

// LeaseView is what the binding-server replicas' Leases say now.
type LeaseView struct {
	// Trusted: the view is current (not stale after an API-server outage);
	// when not, TrustWait is how soon to look again.
	Trusted   bool
	TrustWait time.Duration
	// Replicas are the Leases of the replicas the binding's nodes name; a
	// replica absent could not be read (retried).
	Replicas map[string]ReplicaLease
}

// ReplicaLease is a replica's Lease as the cache holds it.
type ReplicaLease struct {
	Found bool
	// Renewed is the Lease's last renewal; Expires adds its duration.
	Renewed, Expires time.Time
}

// renewPeriod is how often the replica renews its Lease (a third of its
// duration, as pkg/replicalease does); 0 for a Lease not found.
func (l ReplicaLease) renewPeriod() time.Duration { return l.Expires.Sub(l.Renewed) / 3 }

// StoredManifest is the artifact store's verdict on a node's stored manifest.
type StoredManifest struct {
	PodUID    string
	Artifacts tetherv1.NodeArtifacts
}

// Policy is the controller's configuration Derive applies.
type Policy struct {
	// StatusInterval and MissedHeartbeats are the binding server's: a node
	// is lost when silent past them (checkHeartbeats).
	StatusInterval   time.Duration
	MissedHeartbeats int
	// ArtifactGrace is how long after the TrainJob completed the manifests'
	// verdicts are awaited before the artifacts are incomplete.
	ArtifactGrace time.Duration
	// StoreChecked: the artifact store can be asked for a stored manifest
	// the binding lacks a verdict on, before it is called missing.
	StoreChecked bool
	// CreateFailuresRead: the trainer Jobs' FailedCreate Events can be read.
	CreateFailuresRead bool
}

// Event is an Event about the binding's TrainJob.
type Event struct {
	Type, Reason, Note string
}

// Wants are what the controller is asked to do after Derive.
type Wants struct {
	// StoredManifests and CreateFailure are reads to make before deriving
	// again (the Outcome that asks for them is provisional).
	StoredManifests []int32
	CreateFailure   bool
	// ListedPaths are the verified manifests (rank and recorded SHA-256)
	// whose listed paths the required-outputs check needs before the
	// artifacts are promoted (nil: none).
	ListedPaths map[int32]string
	// Promote: every artifact is verified (and the required outputs are
	// there); put the verified versions in place, then ArtifactsPromoted
	// (or PromotionFailed) before the write.
	Promote bool
}

// Provisional says the Outcome waits for reads: derive again with them.
func (w Wants) Provisional() bool {
	return len(w.StoredManifests) > 0 || w.CreateFailure || w.ListedPaths != nil
}

// Outcome is what Derive decided.
type Outcome struct {
	Status tetherv1.WorkerBindingStatus
	// Events are announced once the status is written (a write that lost
	// a race is derived again, and announced, by the next reconcile);
	// Warnings at once.
	Events, Warnings []Event
	// Requeue is when to look again (0: on the next watch event only).
	Requeue time.Duration
	Want    Wants
}

// Create-failure timing: a binding whose admitted job has no trainer pod
// looks for the Jobs' FailedCreate Events createFailureRecheck apart, first
// at createFailureFirstLook of age (the Job controller reports a refused
// pod within a second or two of the Job's creation, which follows the
// binding; before that a read is what a burst of new TrainJobs would pay
// several times each, for nothing).
const (
	createFailureRecheck   = 15 * time.Second
	createFailureFirstLook = 5 * time.Second
)

// NeedsNodeCount says whether the controller should read the job's JobSet
// to count its nodes: not known yet, more than node 0 bound, and the job
// has a trainer pod, which its JobSet precedes (before, a read mostly finds
// none yet, and a burst of new TrainJobs paid one such read per reconcile).
func NeedsNodeCount(wb *tetherv1.WorkerBinding, pods []corev1.Pod) bool {
	return wb.Status.NodeCount == 0 && Settings(&wb.Spec).Nodes != jobconfig.NodesPrimary && len(pods) > 0
}

// Derive decides a binding's status from what its reconcile observed: the
// admission conditions (token issued, pods injected), each bound pod's
// attempts and trainer exits (the sidecar never learns them), the
// TrainJob's conditions, which alone make the binding final (with the
// artifact gate), lost heartbeats and pods that cannot be created, and the
// outcome conditions that restate the phase (SetOutcomeConditions). wb is
// not changed.
func Derive(wb *tetherv1.WorkerBinding, p Policy, o Observation) Outcome {
	out := Outcome{Status: *wb.Status.DeepCopy()}
	st := &out.Status
	admit(wb, st, o.Pods, &out)
	requeue := observeStatus(wb, st, p, o, &out)
	if WaitsForPods(st, o.Pods) {
		// Admitted, no pod: say why when the Job says so (FailedCreate).
		recheck := createFailureRecheck
		switch age := o.Now.Sub(wb.CreationTimestamp.Time); {
		case age < createFailureFirstLook:
			recheck = createFailureFirstLook - age
		case !p.CreateFailuresRead:
		case !o.CreateFailureRead:
			out.Want.CreateFailure = true
		case o.CreateFailure != "":
			PodCreateFailed(st, o.CreateFailure)
		}
		requeue = minWait(requeue, recheck)
	}
	promote, wait := requireOutputs(wb, st, o, &out)
	out.Want.Promote = promote
	out.Requeue = minWait(requeue, wait)
	SetOutcomeConditions(st, wb.Generation)
	return out
}

// admit sets the phase and conditions the admission stage knows about: the
// token is issued, and whether the job's trainer pods carry the sidecar.
func admit(wb *tetherv1.WorkerBinding, st *tetherv1.WorkerBindingStatus, pods []corev1.Pod, out *Outcome) {
	Initial(st)
	st.ObservedGeneration = wb.Generation
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: tetherv1.ConditionTokenIssued, Status: metav1.ConditionTrue,
		Reason: tetherv1.ReasonTokenIssued, Message: "token Secret " + wb.Spec.TokenSecretName, ObservedGeneration: wb.Generation})
	cond := PodsInjectedCondition(pods, Settings(&wb.Spec).Nodes)
	cond.ObservedGeneration = wb.Generation
	// A copy: SetStatusCondition below overwrites the condition in place, and
	// the Warning compares with what it was (an alias would compare the new
	// message with itself and never warn).
	var prev *metav1.Condition
	if c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionPodsInjected); c != nil {
		prev = c.DeepCopy()
	}
	if prev != nil && prev.Status == metav1.ConditionFalse && cond.Reason == tetherv1.ReasonNoPods {
		// The evidence outlives the pods: uninjected pods that ended still
		// ran unbound (a job that finishes so is NeverBound, saying so).
		cond = *prev
	}
	meta.SetStatusCondition(&st.Conditions, cond)
	if cond.Reason == tetherv1.ReasonPodsNotInjected && (prev == nil || prev.Message != cond.Message) {
		out.Warnings = append(out.Warnings, Event{corev1.EventTypeWarning, tetherv1.ReasonPodsNotInjected, cond.Message})
	}
}

// observeStatus applies the node count, the pods and the TrainJob's
// conditions, then the heartbeats. It returns when to look again.
func observeStatus(wb *tetherv1.WorkerBinding, st *tetherv1.WorkerBindingStatus, p Policy, o Observation, out *Outcome) time.Duration {
	settings := Settings(&wb.Spec)
	switch {
	case st.NodeCount > 0:
	case settings.Nodes == jobconfig.NodesPrimary:
		SetNodeCount(st, 1)
	case o.NodeCount > 0:
		SetNodeCount(st, o.NodeCount)
	}
	conds := o.Conditions
	suspended := meta.IsStatusConditionTrue(conds, trainjob.ConditionSuspended)
	out.Events = append(out.Events, observePods(st, settings, o.Pods, suspended, o.Now)...)
	observeCancel(st, o.Pods, suspended)
	for _, typ := range []string{trainjob.ConditionComplete, trainjob.ConditionFailed} {
		if c := meta.FindStatusCondition(conds, typ); c != nil && c.Status == metav1.ConditionTrue {
			NeverBound(st, neverBoundMessage(st, typ))
		}
	}
	if c := meta.FindStatusCondition(conds, trainjob.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		JobFailed(st, "TrainJob failed: "+c.Message)
	}
	if c := meta.FindStatusCondition(conds, trainjob.ConditionComplete); c != nil && c.Status == metav1.ConditionTrue {
		JobCompleted(st)
		// The sidecars upload their manifests before their pods end, so
		// before the TrainJob completes; the grace covers the status write
		// of the last verdict.
		if awaitingArtifacts(st) {
			if wait := c.LastTransitionTime.Add(p.ArtifactGrace).Sub(o.Now); wait > 0 {
				return minWait(o.Retry, wait)
			}
			// Before saying so, the store's own copy of each missing
			// manifest: a verdict the binding server could not record.
			if p.StoreChecked && o.StoredManifests == nil {
				out.Want.StoredManifests = UnverifiedRanks(st)
			}
			for rank, m := range o.StoredManifests {
				ArtifactsRecorded(st, rank, m.PodUID, m.Artifacts)
			}
			if awaitingArtifacts(st) {
				ArtifactsIncomplete(st, MissingArtifacts(st))
			}
		}
	}
	if c := meta.FindStatusCondition(conds, trainjob.ConditionSuspended); c != nil {
		if c.Status == metav1.ConditionTrue {
			Suspended(st, "TrainJob suspended: "+c.Reason)
		} else {
			Resumed(st)
		}
	}
	requeue := minWait(checkHeartbeats(st, settings, p, o.Leases, o.Now), o.Retry)
	return minWait(requeue, checkStall(st, settings, o.Now, out))
}

func awaitingArtifacts(st *tetherv1.WorkerBindingStatus) bool {
	return st.Phase == tetherv1.PhaseFinishing && st.Reason == tetherv1.ReasonAwaitingArtifacts
}

// WaitsForPods reports whether the binding waits for its first pod of an
// admitted job (Pending, not suspended or preempted) and none exists.
func WaitsForPods(st *tetherv1.WorkerBindingStatus, pods []corev1.Pod) bool {
	if st.Phase != tetherv1.PhasePending || st.Attempt > 0 {
		return false
	}
	switch st.Reason {
	case tetherv1.ReasonSuspended, tetherv1.ReasonPreempted:
		return false
	}
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			return false
		}
	}
	return true
}

// minWait is the sooner of two requeue delays (0: none).
func minWait(a, b time.Duration) time.Duration {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}
