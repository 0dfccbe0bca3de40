package endpoint

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/upload"
)

// Once a node's manifest for the current attempt is verified, that manifest
// is what the node's artifacts are: a write of a path it does not list is
// refused before its body is read (a PUT, a direct upload's authorize and
// its commit), so nothing the manifest does not name is stored at a final
// key after the verdict. Without this, an object written after the verdict
// sat at its final key and was served once the job succeeded, as if it were
// a verified artifact. The node may still write what the manifest lists (a
// changed version waits as the key's pending object, promoted only if a
// later verified manifest lists it) and its manifest (a new one is verified
// again). A new attempt (preemption, a replaced pod, a JobSet restart)
// forgets the verdict (Job.Verified), and the node writes again.

// checkListed refuses node rank's write of path (relative to the job's
// prefix) when the node's manifest for the current attempt is verified and
// does not list it.
func (h *Handler) checkListed(rq *request, job Job, rank int, path string) *apiError {
	sha, verified := job.Verified[rank]
	if !verified {
		return nil
	}
	rel := strings.TrimPrefix(path, upload.NodePrefix(rank))
	if rel == upload.ManifestName {
		return nil
	}
	vm := pending.VerifiedManifest{Rank: rank, SHA256: sha}
	listed, err := h.listed.Lists(rq.r.Context(), h.Store.Backend(), job.JobID, vm, rel)
	switch {
	case err == nil && listed:
		return nil
	case err == nil:
		return &apiError{http.StatusForbidden, "AccessDenied",
			fmt.Sprintf("key %s is not listed by node %d's manifest, and the node's manifest for this attempt is already verified: "+
				"a verified node writes only the files its manifest lists (and its manifest); nothing was stored. "+
				"Write every artifact before the final flush; a new attempt writes again",
				rq.key, rank)}
	case pending.IsNotListable(err):
		// The binding's verdict is on a version the store no longer holds
		// (the node is uploading a newer manifest, whose verdict is being
		// recorded): what is listed is known once it is.
		rq.retryAfter = time.Second
		rq.log.Info("a verified manifest is not stored as its verdict recorded it", "node", rank, "error", err.Error())
		return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("node %d's verified manifest is not stored as its verdict recorded it (a newer one is being verified?), so whether it lists key %s cannot be told now; retry", rank, rq.key)}
	default:
		rq.log.Error(err, "reading a verified manifest", "node", rank)
		return backendReadError(err)
	}
}
