package artifactreads

import (
	"context"
	"net/http"
	"slices"
	"strings"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/upload"
)

// A Succeeded binding promises that its artifacts are what its verified
// manifests list: promotion put exactly those versions in place. The job's
// prefix may hold more (files written and later deleted or left out of the
// manifest, a failed earlier attempt's, anything stored before the store's
// own rules): none of it is a verified artifact, so a Succeeded binding's
// reads serve the manifests, the files they list and the archived trainer
// logs (Tether's own keys) only. A binding that has not succeeded is read
// as it is stored (a running job's checkpoints, a failed job's leftovers),
// and pkg/client checks every file against its manifest anyway.

// refuseUnverified answers a read of rel (relative to the job's prefix) of a
// Succeeded binding that is not one of its verified artifacts, and reports
// whether it did.
func (r *Handler) refuseUnverified(ctx context.Context, w http.ResponseWriter, wb *tetherv1.WorkerBinding, rel string) bool {
	if wb.Status.Phase != tetherv1.PhaseSucceeded || archivedLog(wb, rel) {
		return false
	}
	verified := lifecycle.VerifiedManifests(&wb.Status)
	rank := upload.KeyRank(rel, int(wb.Status.NodeCount))
	sha, ok := verified[int32(rank)]
	path := strings.TrimPrefix(rel, upload.NodePrefix(rank))
	listed := false
	if ok {
		if path == upload.ManifestName {
			return false
		}
		var err error
		listed, err = r.listed.Lists(ctx, r.opts.Backend, wb.Spec.JobID, pending.VerifiedManifest{Rank: rank, SHA256: sha}, path)
		switch {
		case pending.IsNotListable(err):
			r.fail(w, http.StatusConflict, "manifest_changed",
				"WorkerBinding %s/%s is Succeeded, but node %d's verified manifest is no longer stored as it was verified (%v): which objects are its verified artifacts cannot be told, so none of node %d's is served",
				wb.Namespace, wb.Name, rank, err, rank)
			return true
		case err != nil:
			r.storeError(w, upload.NodePrefix(rank)+upload.ManifestName, err)
			return true
		}
	}
	if listed {
		return false
	}
	r.fail(w, http.StatusNotFound, "not_verified",
		"%q is not part of the job's verified artifacts: WorkerBinding %s/%s is Succeeded, and what it serves is what its verified manifests list (and its archived trainer logs); kubectl tether artifacts ls %s lists them",
		truncate(rel, 200), wb.Namespace, wb.Name, wb.Name)
	return true
}

// archivedLog says whether rel is a trainer log the controller archived:
// under upload.LogsDir (which no sidecar can write), or a key the binding
// lists as a log (control planes before it archived under logs/).
func archivedLog(wb *tetherv1.WorkerBinding, rel string) bool {
	if strings.HasPrefix(rel, upload.LogsDir) {
		return true
	}
	return wb.Status.Artifacts != nil && slices.Contains(wb.Status.Artifacts.Logs, wb.Spec.JobID+"/"+rel)
}
