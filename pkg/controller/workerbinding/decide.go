package workerbinding

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// A binding's status is decided in three steps: gather reads everything
// (an Observation), lifecycle.Derive decides from it alone, then the
// reconcile acts (promotes, archives logs) and writes. Derive may ask for
// reads that only its own decision makes worth their cost (the store's
// copy of a manifest once the grace is over, the Jobs' FailedCreate Events
// once the binding waits for pods): those are gathered, and it decides
// again from the same starting point.

// nodeCountRetry is how soon a failed read of the JobSet is retried.
const nodeCountRetry = 5 * time.Second

// maxProvisionalReads bounds the rounds of reads Derive may ask for in
// one reconcile: one per kind of read (lifecycle.Wants).
const maxProvisionalReads = 3

// policy is what of the reconciler's configuration Derive applies.
func (r *Reconciler) policy() lifecycle.Policy {
	return lifecycle.Policy{StatusInterval: r.StatusInterval, MissedHeartbeats: r.MissedHeartbeats, ArtifactGrace: r.ArtifactGrace,
		StoreChecked: r.Manifests != nil, CreateFailuresRead: r.Live != nil}
}

// decide derives wb's new status from what the reconcile sees now, and
// puts the verified artifacts in place when the derived status asks for
// it, before the binding may say Succeeded. It sets wb.Status and returns
// when to look again and what to announce once the status is written.
func (r *Reconciler) decide(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, pods []corev1.Pod, now time.Time) (lifecycle.Outcome, time.Duration) {
	o := r.gather(ctx, tj, wb, pods, now)
	out := lifecycle.Derive(wb, r.policy(), o)
	// A read can make the next one worth its cost (the store's verdict
	// on a manifest completes the gate, whose required outputs then need
	// the manifests' paths); each read is made once, so this ends.
	for range maxProvisionalReads {
		if !out.Want.Provisional() {
			break
		}
		r.gatherWanted(ctx, tj, wb, &o, out.Want)
		out = lifecycle.Derive(wb, r.policy(), o)
	}
	wb.Status = out.Status
	requeue := out.Requeue
	// Whoever found every artifact verified (this controller, or the binding
	// server on a verified manifest), the latest versions are put in place
	// here, before the binding may say Succeeded.
	if out.Want.Promote {
		if err := r.promote(ctx, wb); err != nil {
			logf.FromContext(ctx).Error(err, "promoting verified artifacts; retrying")
			lifecycle.PromotionFailed(&wb.Status, err)
			if requeue == 0 || requeue > promotionRetry {
				requeue = promotionRetry
			}
		} else {
			lifecycle.ArtifactsPromoted(&wb.Status)
		}
	}
	return out, requeue
}

// gather reads what deciding wb's status needs: the TrainJob's conditions,
// its trainer pods (read by the caller), the JobSet's node count (once,
// lifecycle.NeedsNodeCount) and the Leases of the replicas holding its
// nodes' sessions.
func (r *Reconciler) gather(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, pods []corev1.Pod, now time.Time) lifecycle.Observation {
	o := lifecycle.Observation{Now: now, Conditions: trainjob.Conditions(tj), Pods: pods}
	if r.Live != nil && lifecycle.NeedsNodeCount(wb, pods) {
		o.NodeCount, o.Retry = r.countNodes(ctx, tj)
	}
	if r.Leases != nil {
		o.Leases = r.leaseView(ctx, &wb.Status, now)
	}
	return o
}

// countNodes reads the TrainJob's JobSet to count its trainer nodes (0:
// not known). A read that failed is retried after the returned duration:
// until the count is known the artifact endpoint cannot tell whose a key
// under nodes/<r>/ is, and nothing else may bring the binding back soon (a
// quiet job's pods change rarely).
func (r *Reconciler) countNodes(ctx context.Context, tj *unstructured.Unstructured) (int, time.Duration) {
	n, err := trainjob.NodeCount(ctx, r.Live, types.NamespacedName{Namespace: tj.GetNamespace(), Name: tj.GetName()})
	switch {
	case apierrors.IsNotFound(err):
		return 0, 0 // gone with the job (its pods are on their way out)
	case meta.IsNoMatchError(err):
		// No JobSet API (a test cluster without JobSet): the gate counts
		// the nodes seen.
		logf.FromContext(ctx).V(1).Info("no JobSet API: counting the nodes seen", "error", err.Error())
		return 0, 0
	case err != nil:
		logf.FromContext(ctx).Info("cannot read the TrainJob's JobSet to count its nodes; will retry", "retryAfter", nodeCountRetry.String(), "error", err.Error())
		return 0, nodeCountRetry
	}
	return n, 0
}

// leaseView reads the replicas' Leases the binding's nodes name (from the
// cache), unless the view is stale.
func (r *Reconciler) leaseView(ctx context.Context, st *tetherv1.WorkerBindingStatus, now time.Time) *lifecycle.LeaseView {
	v := &lifecycle.LeaseView{}
	if v.Trusted, v.TrustWait = r.Leases.Trusted(now); !v.Trusted {
		return v
	}
	v.Replicas = map[string]lifecycle.ReplicaLease{}
	for _, replica := range lifecycle.LeaseReplicas(st) {
		lease, err := r.Leases.Lookup(ctx, replica)
		if err != nil {
			logf.FromContext(ctx).Info("cannot read a replica's Lease; will retry", "lease", replica, "error", err.Error())
			continue
		}
		v.Replicas[replica] = lifecycle.ReplicaLease{Found: lease.Found, Renewed: lease.Renewed, Expires: lease.Expires}
	}
	return v
}

// gatherWanted makes the reads Derive asked for.
func (r *Reconciler) gatherWanted(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding, o *lifecycle.Observation, want lifecycle.Wants) {
	if len(want.StoredManifests) > 0 {
		o.StoredManifests = r.storedManifests(ctx, wb.Spec.JobID, want.StoredManifests)
	}
	if want.ListedPaths != nil && o.ListedPaths == nil {
		o.ListedPaths = r.listedPaths(ctx, wb.Spec.JobID, want.ListedPaths)
	}
	if want.CreateFailure {
		o.CreateFailureRead = true
		msg, err := r.createFailure(ctx, tj)
		if err != nil {
			logf.FromContext(ctx).Info("cannot read the trainer Jobs' FailedCreate Events", "error", err.Error())
		}
		o.CreateFailure = msg
	}
}
