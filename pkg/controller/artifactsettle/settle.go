package artifactsettle

import (
	"cmp"
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controller/internal/storeops"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// settleRetry is how soon a drop or a status write that failed is tried
// again.
const settleRetry = 5 * time.Second

// Reconciler settles the artifacts of every final WorkerBinding: what is
// still pending is dropped, and a verdict the dropped versions made untrue
// is taken back on the binding's status. It acts on the status as written,
// after the binding controller wrote the final phase.
type Reconciler struct {
	// Client reads WorkerBindings from the cache and writes their status.
	Client client.Client
	// Pending drops what waited to be promoted (nil: off).
	Pending storeops.PendingArtifacts
	// Manifests reads back a stored manifest (nil: verdicts not checked).
	Manifests storeops.StoredManifests
}

// SetupWithManager watches final WorkerBindings.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("artifact-settlement").
		For(&tetherv1.WorkerBinding{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			wb, ok := o.(*tetherv1.WorkerBinding)
			return ok && lifecycle.IsFinal(wb.Status.Phase)
		}))).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	wb := &tetherv1.WorkerBinding{}
	if err := r.Client.Get(ctx, req.NamespacedName, wb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{RequeueAfter: r.settlePending(ctx, wb)}, nil
}

// settlePending drops what is still pending once the binding is final: a
// failed job's outputs never replace good ones, and a succeeded job's
// verified versions were promoted before it said Succeeded, so what is
// pending then is a late write no manifest lists. Idempotent. It returns
// how soon to try again when the store refused: a final binding may see no
// other event (a soak run under a store outage left a pending object behind
// when the retry relied on the echo of the binding's final status).
func (r *Reconciler) settlePending(ctx context.Context, wb *tetherv1.WorkerBinding) (retry time.Duration) {
	if r.Pending == nil || !lifecycle.IsFinal(wb.Status.Phase) {
		return 0
	}
	n, err := r.Pending.DropPending(ctx, wb.Spec.JobID)
	log := logf.FromContext(ctx)
	if err != nil {
		log.Error(err, "settling pending artifacts; retrying", "phase", wb.Status.Phase, "after", settleRetry.String())
		return settleRetry
	}
	if n > 0 {
		log.Info("dropped pending artifacts no verified manifest lists", "phase", wb.Status.Phase, "objects", n)
	}
	// Checked on every reconcile of such a binding, not only the one that
	// dropped: that one's status write may lose a race with the binding
	// server's, and the next reconcile drops nothing.
	if wb.Status.Phase == tetherv1.PhaseSucceeded || !r.retractDroppedVerdicts(ctx, wb) {
		return 0
	}
	lifecycle.SetOutcomeConditions(&wb.Status, wb.Generation)
	if err := r.Client.Status().Update(ctx, wb); err != nil {
		// A conflict brings the binding's next version, and its reconcile.
		log.Error(err, "recording the verdicts the dropped versions took back; retrying", "after", settleRetry.String())
		return settleRetry
	}
	return 0
}

// retractDroppedVerdicts takes back the verdict of each node of a binding
// that ended without succeeding whose verified manifest listed versions
// just dropped (they waited to be promoted over an earlier version, which
// only success does): its manifest no longer describes the store, which
// keeps the earlier versions, and the binding must not call it verified.
// The soak found it: a job cancelled after its sidecar flushed a rewritten
// checkpoint kept "verified" on a manifest whose file held other bytes.
func (r *Reconciler) retractDroppedVerdicts(ctx context.Context, wb *tetherv1.WorkerBinding) bool {
	if r.Manifests == nil {
		return false
	}
	log := logf.FromContext(ctx)
	changed := false
	for _, rank := range lifecycle.VerifiedRanks(&wb.Status) {
		res, found, err := r.Manifests.StoredManifest(ctx, wb.Spec.JobID, int(rank))
		if err != nil {
			log.Info("cannot check the stored manifest after dropping pending versions", "node", rank, "error", err.Error())
			continue
		}
		if found && res.Verified {
			continue
		}
		var a tetherv1.NodeArtifacts
		if found {
			a = res.Artifacts()
		}
		a.LastError = fmt.Sprintf("the job ended %s/%s, so the versions this node's manifest lists that replaced earlier ones were dropped, not promoted: the store keeps the earlier versions (%s)",
			wb.Status.Phase, wb.Status.Reason, cmp.Or(a.LastError, "the manifest is no longer stored"))
		if lifecycle.VerdictRetracted(&wb.Status, rank, a) {
			log.Info("took back a node's verdict: the versions its manifest lists were dropped", "node", rank, "missing", a.MissingCount)
			changed = true
		}
	}
	return changed
}
