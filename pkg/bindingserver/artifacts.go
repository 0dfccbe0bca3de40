package bindingserver

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// EnableArtifacts serves the job-scoped artifact endpoint (docs/artifacts.md)
// on the binding server's listener, over st: the replica's one artifact
// store, which the controllers promote and sweep through too. With a backend
// that can presign, sidecars upload bodies straight to it (direct uploads,
// upload.PathAuthorize and upload.PathCommit on the same listener) unless
// st's options disable them.
func (s *Server) EnableArtifacts(st *store.Store) {
	h := &endpoint.Handler{
		Store:     st,
		Authorize: s.gate.AuthorizeArtifacts,
		OnVerified: func(_ context.Context, job endpoint.Job, _ string, info upload.ObjectInfo) {
			s.metrics.artifactBytes.Add(float64(info.Size))
			s.metrics.artifactFiles.Inc()
		},
		OnManifest: s.manifestVerified,
		OnDirect:   func(upload.ObjectInfo) { s.metrics.artifactDirect.Inc() },
		// Every refused artifact request is counted, by reason.
		OnRefused: func(reason string) { s.metrics.refusals.WithLabelValues("artifact_" + reason).Inc() },
		Log:       s.log.WithName("artifacts"),
	}
	// Each of the endpoint's own refusals starts at zero: the alert on
	// increase() (TetherUploadFailures) sees the first one of a kind too.
	for _, reason := range endpoint.RefusalReasons() {
		s.metrics.refusals.WithLabelValues("artifact_" + reason)
	}
	s.handler = endpoint.Route(workerauth.WithPodClaim(h), s.handler)
}

// manifestVerified records the store's verdict on a node's manifest; once
// the TrainJob is complete, the last node's verified manifest completes the
// binding.
func (s *Server) manifestVerified(ctx context.Context, job endpoint.Job, res verify.ManifestResult) error {
	a := res.Artifacts()
	key := types.NamespacedName{Namespace: job.Namespace, Name: job.Name}
	if _, err := s.updateStatus(ctx, key, func(st *tetherv1.WorkerBindingStatus) bool {
		return lifecycle.ArtifactsRecorded(st, int32(res.Rank), res.PodUID, a)
	}); err != nil {
		s.log.Error(err, "recording the artifact manifest", "binding", key.String(), "node", res.Rank)
		return err
	}
	s.log.Info("artifact manifest checked", "binding", key.String(), "node", res.Rank, "verified", res.Verified,
		"files", res.Files, "bytes", res.Bytes, "missing", res.Missing)
	return nil
}
