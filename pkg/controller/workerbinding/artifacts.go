package workerbinding

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// The artifact store's work the binding reconciler delegates: it decides
// (from the binding's status) when, these helpers do it in the store.

// PendingArtifacts is the artifact store's handling of deferred overwrites.
type PendingArtifacts interface {
	Promote(ctx context.Context, jobID string, manifests []pending.VerifiedManifest) (int, error)
	DropPending(ctx context.Context, jobID string) (int, error)
}

// StoredManifests checks a node's manifest as the artifact store holds it.
type StoredManifests interface {
	StoredManifest(ctx context.Context, jobID string, rank int) (verify.ManifestResult, bool, error)
}

// recheckStoredManifests records the store's verdict on the stored manifest
// of each node whose verdict the binding lacks once the grace is over: the
// manifest may have been stored while its verdict could not be written
// (the apiserver away when the job ended, the sidecar's retries spent).
func (r *BindingReconciler) recheckStoredManifests(ctx context.Context, wb *tetherv1.WorkerBinding) {
	if r.Manifests == nil {
		return
	}
	log := logf.FromContext(ctx)
	for _, rank := range lifecycle.UnverifiedRanks(&wb.Status) {
		res, found, err := r.Manifests.StoredManifest(ctx, wb.Spec.JobID, int(rank))
		if err != nil {
			log.Info("cannot check the stored manifest", "node", rank, "error", err.Error())
			continue
		}
		if !found {
			continue
		}
		if lifecycle.ArtifactsRecorded(&wb.Status, rank, res.PodUID, res.Artifacts()) {
			log.Info("recorded the verdict on a stored manifest the binding lacked", "node", rank, "verified", res.Verified, "files", res.Files)
		}
	}
}

// promotionRetry is how soon a failed promotion is tried again.
const promotionRetry = 5 * time.Second

// promote puts in place exactly what the verified manifests of a binding
// whose every artifact is verified list, by the digest recorded with each
// verdict. A listed file or manifest no longer stored as listed takes its
// node's verdict back: the binding awaits artifacts again instead of
// succeeding over the wrong bytes.
func (r *BindingReconciler) promote(ctx context.Context, wb *tetherv1.WorkerBinding) error {
	if r.Pending == nil {
		return nil
	}
	var manifests []pending.VerifiedManifest
	for rank, sum := range lifecycle.VerifiedManifests(&wb.Status) {
		manifests = append(manifests, pending.VerifiedManifest{Rank: int(rank), SHA256: sum})
	}
	slices.SortFunc(manifests, func(a, b pending.VerifiedManifest) int { return a.Rank - b.Rank })
	n, err := r.Pending.Promote(ctx, wb.Spec.JobID, manifests)
	var nl *pending.NotAsListedError
	if errors.As(err, &nl) {
		logf.FromContext(ctx).Info("a verified artifact changed before promotion: the node's verdict is taken back", "node", nl.Rank, "path", nl.Path, "why", nl.Why)
		lifecycle.ArtifactsNotAsListed(&wb.Status, int32(nl.Rank), nl.Path, nl.Error())
	}
	if err != nil {
		return err
	}
	if n > 0 {
		logf.FromContext(ctx).Info("promoted verified artifacts", "objects", n)
	}
	return nil
}

// settlePending drops what is still pending once the binding is final: a
// failed job's outputs never replace good ones, and a succeeded job's
// verified versions were promoted before it said Succeeded, so what is
// pending then is a late write no manifest lists. Idempotent. It returns
// how soon to try again when the store refused: a final binding may see no
// other reconcile (a soak run under a store outage left a pending object
// behind when the retry relied on the echo of the binding's final status).
func (r *BindingReconciler) settlePending(ctx context.Context, wb *tetherv1.WorkerBinding) (retry time.Duration) {
	if r.Pending == nil || !lifecycle.IsFinal(wb.Status.Phase) {
		return 0
	}
	n, err := r.Pending.DropPending(ctx, wb.Spec.JobID)
	log := logf.FromContext(ctx)
	if err != nil {
		log.Error(err, "settling pending artifacts; retrying", "phase", wb.Status.Phase, "after", promotionRetry.String())
		return promotionRetry
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
	if err := r.Client.Status().Update(ctx, wb); err != nil {
		// A conflict brings the binding's next version, and its reconcile.
		log.Error(err, "recording the verdicts the dropped versions took back; retrying", "after", promotionRetry.String())
		return promotionRetry
	}
	r.written.Wrote(wb, r.now())
	return 0
}

// retractDroppedVerdicts takes back the verdict of each node of a binding
// that ended without succeeding whose verified manifest listed versions
// just dropped (they waited to be promoted over an earlier version, which
// only success does): its manifest no longer describes the store, which
// keeps the earlier versions, and the binding must not call it verified.
// The soak found it: a job cancelled after its sidecar flushed a rewritten
// checkpoint kept "verified" on a manifest whose file held other bytes.
func (r *BindingReconciler) retractDroppedVerdicts(ctx context.Context, wb *tetherv1.WorkerBinding) bool {
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
