package workerbinding

import (
	"context"
	"errors"
	"slices"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// The artifact store's work the binding reconciler delegates: it decides
// (from the binding's status) when, these helpers do it in the store.

// storedManifests reads the store's verdict on the stored manifest of each
// node of ranks (those whose verdict the binding lacks once the grace is
// over): the manifest may have been stored while its verdict could not be
// written (the apiserver away when the job ended, the sidecar's retries
// spent). A node whose manifest is not stored, or could not be read, is
// absent.
func (r *Reconciler) storedManifests(ctx context.Context, jobID string, ranks []int32) map[int32]lifecycle.StoredManifest {
	log := logf.FromContext(ctx)
	out := map[int32]lifecycle.StoredManifest{}
	for _, rank := range ranks {
		res, found, err := r.Manifests.StoredManifest(ctx, jobID, int(rank))
		if err != nil {
			log.Info("cannot check the stored manifest", "node", rank, "error", err.Error())
			continue
		}
		if !found {
			continue
		}
		log.Info("read the store's verdict on a stored manifest the binding lacked", "node", rank, "verified", res.Verified, "files", res.Files)
		out[rank] = lifecycle.StoredManifest{PodUID: res.PodUID, Artifacts: res.Artifacts()}
	}
	return out
}

// promotionRetry is how soon a failed promotion is tried again.
const promotionRetry = 5 * time.Second

// promote puts in place exactly what the verified manifests of a binding
// whose every artifact is verified list, by the digest recorded with each
// verdict. A listed file or manifest no longer stored as listed takes its
// node's verdict back: the binding awaits artifacts again instead of
// succeeding over the wrong bytes.
func (r *Reconciler) promote(ctx context.Context, wb *tetherv1.WorkerBinding) error {
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

// listedPaths reads what the verified manifests (rank and recorded
// SHA-256) list, for the required-outputs check: the same versions
// promotion reads and puts in place.
func (r *Reconciler) listedPaths(ctx context.Context, jobID string, manifests map[int32]string) *lifecycle.ListedPaths {
	if r.Paths == nil {
		return &lifecycle.ListedPaths{Err: "the controller has no artifact store to read the manifests from"}
	}
	var vms []pending.VerifiedManifest
	for rank, sum := range manifests {
		vms = append(vms, pending.VerifiedManifest{Rank: int(rank), SHA256: sum})
	}
	slices.SortFunc(vms, func(a, b pending.VerifiedManifest) int { return a.Rank - b.Rank })
	paths, err := r.Paths.VerifiedPaths(ctx, jobID, vms)
	var nl *pending.NotAsListedError
	switch {
	case errors.As(err, &nl):
		logf.FromContext(ctx).Info("a verified manifest changed before its required outputs were checked: the node's verdict is taken back",
			"node", nl.Rank, "path", nl.Path, "why", nl.Why)
		return &lifecycle.ListedPaths{Changed: &lifecycle.ChangedManifest{Rank: int32(nl.Rank), Path: nl.Path, Why: nl.Error()}}
	case err != nil:
		logf.FromContext(ctx).Info("cannot read the verified manifests to check the required outputs; will retry", "error", err.Error())
		return &lifecycle.ListedPaths{Err: err.Error()}
	}
	return &lifecycle.ListedPaths{Paths: paths}
}
