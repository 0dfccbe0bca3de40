package server

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/upload"
)

// EnableArtifacts serves the job-scoped artifact endpoint (docs/artifacts.md)
// on the binding server's listener, storing into backend. It returns the
// handler, whose Promote and DropPending the controller calls when a binding
// ends. With a backend that can presign, sidecars upload bodies straight to
// it (direct uploads, upload.PathAuthorize and upload.PathCommit on the same
// listener) unless direct disables them.
func (s *Server) EnableArtifacts(backend upload.Backend, direct endpoint.DirectOptions) *endpoint.Handler {
	h := &endpoint.Handler{
		Backend:   backend,
		Authorize: s.authorizeArtifacts,
		OnVerified: func(_ context.Context, job endpoint.Job, _ string, info upload.ObjectInfo) {
			s.metrics.artifactBytes.Add(float64(info.Size))
			s.metrics.artifactFiles.Inc()
		},
		OnManifest: s.manifestVerified,
		OnDirect:   func(upload.ObjectInfo) { s.metrics.artifactDirect.Inc() },
		// Every refused artifact request is counted, by reason.
		OnRefused: func(reason string) { s.metrics.refusals.WithLabelValues("artifact_" + reason).Inc() },
		Log:       s.log.WithName("artifacts"),
		Direct:    direct,
	}
	s.handler = endpoint.Route(withPodClaim(h), s.handler)
	return h
}

// podClaimKey carries an artifact request's pod claim (its pod token and
// upload.PodHeader) in its context to authorizeArtifacts: the store's
// Authorizer sees the token only, and authorizes the same request again
// when a PUT's body has arrived (recheck).
type podClaimKey struct{}

func withPodClaim(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := podClaim{token: r.Header.Get(binding.HeaderPodToken), uid: r.Header.Get(upload.PodHeader)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), podClaimKey{}, c)))
	})
}

// authorizeArtifacts finds the binding holding token; the store then checks
// that the key lies under the binding's job id. A real token over its
// artifact request rate is asked to slow down (503 SlowDown with
// Retry-After); an unknown one is refused by a cache lookup alone and gets
// no bucket, so made-up tokens cannot fill the table real tokens need.
func (s *Server) authorizeArtifacts(ctx context.Context, token binding.Token) (endpoint.Job, error) {
	hash := token.Hash()
	var list tetherv1.WorkerBindingList
	if err := s.cache.List(ctx, &list, client.MatchingFields{TokenHashIndex: hash}); err != nil {
		return endpoint.Job{}, err
	}
	wb := findByHash(list.Items, hash, s.opts.Now())
	if wb == nil || wb.DeletionTimestamp != nil {
		return endpoint.Job{}, &endpoint.AuthError{Status: http.StatusUnauthorized, Reason: "unknown_token",
			Message: "no binding holds this token (the TrainJob was deleted or its token reissued)"}
	}
	if ok, after := s.limits.allow(classArtifacts, hash, s.opts.Now()); !ok {
		return endpoint.Job{}, endpoint.SlowDown(after, "more than %d artifact requests per second with this token (burst %d): retry after Retry-After",
			ArtifactRate, ArtifactBurst)
	}
	if ref := s.trainJobRefusal(ctx, wb); ref != nil {
		if ref.status == http.StatusUnauthorized {
			return endpoint.Job{}, &endpoint.AuthError{Status: http.StatusUnauthorized, Reason: ref.reason, Message: ref.message}
		}
		return endpoint.Job{}, ref
	}
	// The pod the request names (upload.PodHeader, which the store checks
	// against the node's current pod) must be the pod its token proves.
	claim, _ := ctx.Value(podClaimKey{}).(podClaim)
	claim.namespace = wb.Namespace
	if _, ref := s.proveClaim(ctx, claim, func() (bool, time.Duration) { return s.limits.allow(classPodReviews, hash, s.opts.Now()) }); ref != nil {
		if ref.status == http.StatusServiceUnavailable {
			return endpoint.Job{}, endpoint.SlowDown(max(ref.retryAfter, time.Second), "%s", ref.message)
		}
		return endpoint.Job{}, &endpoint.AuthError{Status: ref.status, Reason: ref.reason, Message: ref.message}
	}
	return endpoint.Job{Namespace: wb.Namespace, Name: wb.Name, JobID: wb.Spec.JobID,
		Writable: lifecycle.ArtifactsWritable(&wb.Status), State: lifecycle.ArtifactsState(&wb.Status),
		Nodes: int(wb.Status.NodeCount), Pods: lifecycle.NodePods(&wb.Status)}, nil
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
