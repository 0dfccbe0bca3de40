package workerbinding

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// observation is what a reconcile saw that deserves an Event beyond a
// phase transition: a trainer exit, a new attempt.
type observation struct {
	eventType, reason, note string
}

// observe applies what the controller can see to the binding's status: how
// many nodes the job has (its JobSet), each node's injected pod and its
// trainer container's exits and restarts (the sidecar never learns them),
// then the TrainJob's conditions, which alone make the binding final (with
// the artifact gate). It returns the duration after which it must look again
// (a heartbeat budget, the artifact grace; 0: none) and what to announce.
func (r *BindingReconciler) observe(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, pods []corev1.Pod, now time.Time) (time.Duration, []observation) {
	st := &wb.Status
	settings := lifecycle.Settings(&wb.Spec)
	var obs []observation
	countRetry := r.recordNodeCount(ctx, tj, wb, settings, len(pods) > 0)
	conds := trainjob.Conditions(tj)
	suspended := meta.IsStatusConditionTrue(conds, trainjob.ConditionSuspended)

	for _, p := range boundPods(pods, settings) {
		// Only a rank's newest pod is its pod: an older one (failed, being
		// replaced) only has its exits recorded while it is still the node's.
		// A pod being deleted or disrupted, or of a suspended job, is on its
		// way out: it starts no attempt (a preempted job's pods are).
		if p.newest && !suspended && !disrupted(p.pod) {
			// An attempt that moved the phase to Pending/AttemptStarted is
			// announced by that transition's Event; one that did not (a
			// replaced pod beside running nodes) needs its own.
			previous := lifecycle.InPlaceOf(lifecycle.Node(st, p.seen.Rank), p.seen.UID)
			_, started := lifecycle.PodSeen(st, p.seen, false, now)
			if started != "" && !(st.Phase == tetherv1.PhasePending && st.Reason == tetherv1.ReasonAttemptStarted) {
				o := attemptObservation(st, started)
				if started == tetherv1.AttemptPodReplaced {
					o.note += previous
				}
				obs = append(obs, o)
			}
		}
		if disrupted(p.pod) {
			// Deleted or disrupted (preemption, eviction, drain): its SIGTERM
			// exit (143) is not a verdict on the training, and the job-level
			// outcome decides.
			continue
		}
		cs := containerStatus(p.pod, settings.TrainerContainer)
		if cs == nil {
			continue
		}
		// The exit before the last restart first, then the current one.
		for _, t := range []*corev1.ContainerStateTerminated{cs.LastTerminationState.Terminated, cs.State.Terminated} {
			if t == nil {
				continue
			}
			// restartCount counts the restarts so far: those after the last
			// termination, none yet after the current one.
			before := st.Attempt
			_, isNew := lifecycle.TrainerExited(st, p.seen.Rank, p.seen.UID, lifecycle.Exit{Code: t.ExitCode, Reason: t.Reason, FinishedAt: t.FinishedAt.Time},
				cs.RestartCount, now)
			if isNew {
				eventType, note := lifecycle.ExitEvent(st, p.seen.Rank)
				obs = append(obs, observation{eventType, tetherv1.ReasonTrainerExited, note})
			}
			if st.Attempt != before {
				o := attemptObservation(st, tetherv1.AttemptTrainerRestarted)
				if n := lifecycle.Node(st, p.seen.Rank); n != nil && n.LastExit != nil {
					o.note += fmt.Sprintf(": the kubelet restarted the trainer in place (restart %d) after it %s",
						n.Restarts, strings.TrimPrefix(lifecycle.DescribeExit(st, n.LastExit), "trainer on pod "+n.PodName+" "))
				}
				obs = append(obs, o)
			}
		}
	}

	for _, typ := range []string{trainjob.ConditionComplete, trainjob.ConditionFailed} {
		if c := meta.FindStatusCondition(conds, typ); c != nil && c.Status == metav1.ConditionTrue {
			lifecycle.NeverBound(st, neverBoundMessage(st, typ))
		}
	}
	if c := meta.FindStatusCondition(conds, trainjob.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		lifecycle.JobFailed(st, fmt.Sprintf("TrainJob failed: %s", c.Message))
	}
	if c := meta.FindStatusCondition(conds, trainjob.ConditionComplete); c != nil && c.Status == metav1.ConditionTrue {
		lifecycle.JobCompleted(st)
		// The sidecars upload their manifests before their pods end, so
		// before the TrainJob completes; the grace covers the status write
		// of the last verdict.
		if st.Phase == tetherv1.PhaseFinishing && st.Reason == tetherv1.ReasonAwaitingArtifacts {
			if wait := c.LastTransitionTime.Add(r.ArtifactGrace).Sub(now); wait > 0 {
				return minWait(countRetry, wait), obs
			}
			// Before saying so, the store's own copy of each missing
			// manifest: a verdict the binding server could not record.
			r.recheckStoredManifests(ctx, wb)
			if st.Phase == tetherv1.PhaseFinishing && st.Reason == tetherv1.ReasonAwaitingArtifacts {
				lifecycle.ArtifactsIncomplete(st, lifecycle.MissingArtifacts(st))
			}
		}
	}
	if c := meta.FindStatusCondition(conds, trainjob.ConditionSuspended); c != nil {
		if c.Status == metav1.ConditionTrue {
			lifecycle.Suspended(st, "TrainJob suspended: "+c.Reason)
		} else {
			lifecycle.Resumed(st)
		}
	}
	requeue := r.checkHeartbeats(ctx, st, settings, now)
	if countRetry > 0 {
		requeue = minWait(requeue, countRetry)
	}
	// Whoever found every artifact verified (this controller, or the binding
	// server on a verified manifest), the latest versions are put in place
	// here, before the binding may say Succeeded.
	if lifecycle.Promoting(st) {
		if err := r.promote(ctx, wb); err != nil {
			logf.FromContext(ctx).Error(err, "promoting verified artifacts; retrying")
			lifecycle.PromotionFailed(st, err)
			if requeue == 0 || requeue > promotionRetry {
				requeue = promotionRetry
			}
		} else {
			lifecycle.ArtifactsPromoted(st)
		}
	}
	return requeue, obs
}

// neverBoundMessage says why a TrainJob that ended (typ Complete or
// Failed) was never bound, from the PodsInjected evidence.
func neverBoundMessage(st *tetherv1.WorkerBindingStatus, typ string) string {
	msg := fmt.Sprintf("the TrainJob is %s, but none of its trainer pods ever ran with the Tether sidecar: nothing was bound", typ)
	if c := meta.FindStatusCondition(st.Conditions, tetherv1.ConditionPodsInjected); c != nil && c.Status == metav1.ConditionFalse {
		msg += "; " + c.Message
	}
	return msg
}

// checkHeartbeats catches a worker whose replica crashed: nobody holds its
// session, and it is silent past the budget. A node whose session a replica
// holds under a current Lease is that replica's to watch (its read deadline
// and liveness check record a silence); once the Lease expires the node is
// lost MissedHeartbeats intervals after the later of its last recorded
// heartbeat and the Lease's last renewal, unless another replica took the
// session. A node recorded without a Lease falls back to its recorded
// heartbeat, written at least every StatusInterval by a replica without one.
func (r *BindingReconciler) checkHeartbeats(ctx context.Context, st *tetherv1.WorkerBindingStatus, settings tetherv1.WorkerBindingSettings, now time.Time) time.Duration {
	if st.Phase != tetherv1.PhaseRegistered && st.Phase != tetherv1.PhaseRunning {
		return 0
	}
	missed := time.Duration(r.MissedHeartbeats) * settings.HeartbeatInterval.Duration
	var next time.Duration
	// While the view of the Leases is stale (the apiserver or etcd was
	// away: no renewal and no heartbeat write could land), silence in the
	// status says nothing of the workers: judge once it is current again.
	if r.Leases != nil {
		if ok, wait := r.Leases.Trusted(now); !ok {
			return wait
		}
	}
	for i := range st.Nodes {
		n := &st.Nodes[i]
		last := n.LastHeartbeatTime
		if last == nil {
			last = n.RegisteredTime
		}
		if last == nil || n.HeartbeatLost || n.Terminating || n.LastExit != nil && n.LastExit.ExitCode == 0 && !n.LastExit.Restarted {
			continue
		}
		since, budget := last.Time, r.StatusInterval+missed
		why := func(silent time.Duration) string {
			return fmt.Sprintf("no heartbeat recorded for %s", silent.Round(time.Second))
		}
		if n.SessionReplica != "" && r.Leases != nil {
			lease, err := r.Leases.Lookup(ctx, n.SessionReplica)
			if err != nil {
				logf.FromContext(ctx).Info("cannot read a replica's Lease; will retry", "lease", n.SessionReplica, "error", err.Error())
				next = minWait(next, time.Second)
				continue
			}
			if lease.Found && now.Before(lease.Expires) {
				// Vouched for: the Lease watcher reconciles the binding if
				// the Lease expires.
				continue
			}
			// The worker may have been heard up to one renewal period
			// after the Lease's last renewal: that much more, so that the
			// node is lost only after missedHeartbeats intervals of silence.
			budget = missed + lease.RenewPeriod()
			replica := n.SessionReplica
			if lease.Found && lease.Renewed.After(since) {
				since = lease.Renewed
				why = func(silent time.Duration) string {
					return fmt.Sprintf("no heartbeat for %s: replica %s, which held the session, stopped renewing its Lease at %s",
						silent.Round(time.Second), replica, lease.Renewed.UTC().Format(time.RFC3339))
				}
			} else {
				why = func(silent time.Duration) string {
					return fmt.Sprintf("no heartbeat recorded for %s, and replica %s, which held the session, holds no current Lease",
						silent.Round(time.Second), replica)
				}
			}
		}
		wait := budget - now.Sub(since) + time.Second
		if now.Sub(since) > budget {
			lifecycle.HeartbeatLost(st, n.Rank, why(now.Sub(since)))
			continue
		}
		next = minWait(next, wait)
	}
	return next
}

// minWait is the sooner of two requeue delays (0: none).
func minWait(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// recordNodeCount records how many nodes the binding binds: 1 for
// nodes=primary, else the JobSet's trainer nodes (read once; until the
// JobSet exists the binding counts the nodes it has seen). The JobSet is
// read only once the job has a trainer pod (hasPods), which its JobSet
// precedes: before, a read mostly finds none yet (Trainer creates it after
// the binding), and a burst of new TrainJobs paid one such read per
// reconcile (test/performance/controller). The first pod's reconcile records the
// count, in practice before its sidecar registers (the count is
// informational to it). A read that failed is retried after the returned
// duration (0: none needed): until the count is known the artifact
// endpoint cannot tell whose a key under nodes/<r>/ is, and nothing else
// may bring the binding back soon (a quiet job's pods change rarely).
func (r *BindingReconciler) recordNodeCount(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, settings tetherv1.WorkerBindingSettings, hasPods bool) time.Duration {
	if wb.Status.NodeCount > 0 {
		return 0
	}
	if settings.Nodes == jobconfig.NodesPrimary {
		lifecycle.SetNodeCount(&wb.Status, 1)
		return 0
	}
	if r.Live == nil || !hasPods {
		return 0
	}
	n, err := trainjob.NodeCount(ctx, r.Live, types.NamespacedName{Namespace: tj.GetNamespace(), Name: tj.GetName()})
	switch {
	case apierrors.IsNotFound(err):
		return 0 // gone with the job (its pods are on their way out)
	case meta.IsNoMatchError(err):
		// No JobSet API (a test cluster without JobSet): the gate counts
		// the nodes seen.
		logf.FromContext(ctx).V(1).Info("no JobSet API: counting the nodes seen", "error", err.Error())
		return 0
	case err != nil:
		logf.FromContext(ctx).Info("cannot read the TrainJob's JobSet to count its nodes; will retry", "retryAfter", nodeCountRetry.String(), "error", err.Error())
		return nodeCountRetry
	}
	lifecycle.SetNodeCount(&wb.Status, n)
	return 0
}

// nodeCountRetry is how soon a failed read of the JobSet is retried.
const nodeCountRetry = 5 * time.Second

// boundPod is an injected trainer pod of a bound node.
type boundPod struct {
	pod  *corev1.Pod
	seen lifecycle.Pod
	// newest is true for the newest pod of its rank.
	newest bool
}

// boundPods are the job's injected trainer pods of bound nodes, oldest
// first, so that a replacement is seen after the pod it replaces.
func boundPods(pods []corev1.Pod, settings tetherv1.WorkerBindingSettings) []boundPod {
	var out []boundPod
	for i := range pods {
		p := &pods[i]
		if !trainjob.IsInjected(p) {
			continue
		}
		rank, err := trainjob.Rank(p)
		if err != nil || rank >= binding.MaxBoundNodes || rank > 0 && settings.Nodes == jobconfig.NodesPrimary {
			continue
		}
		out = append(out, boundPod{pod: p, seen: lifecycle.Pod{Rank: int32(rank), Name: p.Name, UID: string(p.UID),
			NodeName: p.Spec.NodeName, RestartAttempt: trainjob.RestartAttempt(p)}})
	}
	sort.SliceStable(out, func(a, b int) bool {
		pa, pb := out[a].pod, out[b].pod
		ta, tb := pa.CreationTimestamp, pb.CreationTimestamp
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		// Created within the same second (the timestamps' resolution): a
		// later JobSet restart attempt is the newer, and a pod going away
		// is older than one that is not (a replacement of a pod that failed
		// or was deleted at once); the name decides only a tie left.
		if ra, rb := out[a].seen.RestartAttempt, out[b].seen.RestartAttempt; ra != rb {
			return ra < rb
		}
		if la, lb := leaving(pa), leaving(pb); la != lb {
			return la
		}
		return pa.Name < pb.Name
	})
	seen := map[int32]bool{}
	for i := len(out) - 1; i >= 0; i-- {
		if r := out[i].seen.Rank; !seen[r] {
			seen[r], out[i].newest = true, true
		}
	}
	return out
}

// leaving says the pod is being deleted or has ended.
func leaving(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

func attemptObservation(st *tetherv1.WorkerBindingStatus, by string) observation {
	note := fmt.Sprintf("attempt %d started: %s", st.Attempt, by)
	if st.AttemptNode != nil && st.NodeCount > 1 {
		note += fmt.Sprintf(" (node %d)", *st.AttemptNode)
	}
	return observation{corev1.EventTypeNormal, tetherv1.ReasonAttemptStarted, note}
}

// disrupted reports whether the pod is being deleted or was marked for
// disruption by the control plane (condition DisruptionTarget).
func disrupted(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
