package workerauth

import (
	"context"
	"net/http"
	"time"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// podClaimKey carries an artifact request's pod claim (its pod token and
// names.HeaderArtifactPodUID) in its context to AuthorizeArtifacts: the store's
// Authorizer sees the token only, and authorizes the same request again
// when a PUT's body has arrived (recheck).
type podClaimKey struct{}

// WithPodClaim puts the request's pod claim where AuthorizeArtifacts finds
// it: wrap the store's handler in it.
func WithPodClaim(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := podClaim{token: r.Header.Get(names.HeaderPodToken), uid: r.Header.Get(names.HeaderArtifactPodUID)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), podClaimKey{}, c)))
	})
}

// AuthorizeArtifacts is the store's Authorizer (endpoint.Handler.Authorize): it
// finds the binding holding token; the store then checks that the key lies
// under the binding's job id. A real token over its artifact request rate
// is asked to slow down (503 SlowDown with Retry-After); an unknown one is
// refused by a cache lookup alone and gets no bucket, so made-up tokens
// cannot fill the table real tokens need.
func (g *Gate) AuthorizeArtifacts(ctx context.Context, token binding.Token) (endpoint.Job, error) {
	hash := token.Hash()
	wb, err := g.cached(ctx, hash, g.now())
	if err != nil {
		return endpoint.Job{}, err
	}
	if wb == nil || wb.DeletionTimestamp != nil {
		return endpoint.Job{}, &endpoint.AuthError{Status: http.StatusUnauthorized, Reason: "unknown_token",
			Message: "no binding holds this token (the TrainJob was deleted or its token reissued)"}
	}
	if ok, after := g.limits.allow(classArtifacts, hash, g.now()); !ok {
		return endpoint.Job{}, endpoint.SlowDown(after, "more than %d artifact requests per second with this token (burst %d): retry after Retry-After",
			ArtifactRate, ArtifactBurst)
	}
	if ref := g.trainJobRefusal(ctx, wb); ref != nil {
		if ref.Status == http.StatusUnauthorized {
			return endpoint.Job{}, &endpoint.AuthError{Status: http.StatusUnauthorized, Reason: ref.Reason, Message: ref.Message}
		}
		return endpoint.Job{}, ref
	}
	// The pod the request names (names.HeaderArtifactPodUID, which the store checks
	// against the node's current pod) must be the pod its token proves.
	claim, _ := ctx.Value(podClaimKey{}).(podClaim)
	claim.namespace = wb.Namespace
	proven, ref := g.proveClaim(ctx, claim, func() (bool, time.Duration) { return g.limits.allow(classPodReviews, hash, g.now()) })
	if ref != nil {
		if ref.Status == http.StatusServiceUnavailable {
			return endpoint.Job{}, endpoint.SlowDown(max(ref.RetryAfter, time.Second), "%s", ref.Message)
		}
		return endpoint.Job{}, &endpoint.AuthError{Status: ref.Status, Reason: ref.Reason, Message: ref.Message}
	}
	pods := lifecycle.NodePods(&wb.Status)
	if r, ok := g.preemptedPod(ctx, wb, proven, pods); ok {
		pods[r] = proven.uid
	}
	return endpoint.Job{Namespace: wb.Namespace, Name: wb.Name, JobID: wb.Spec.JobID,
		Writable: lifecycle.ArtifactsWritable(&wb.Status), State: lifecycle.ArtifactsState(&wb.Status),
		Nodes: int(wb.Status.NodeCount), Pods: pods, Verified: lifecycle.VerifiedNodes(&wb.Status)}, nil
}

// preemptedPod says whether the proven pod is a preempted attempt's pod
// flushing on its way out, and its rank. A preempted binding forgets its
// nodes' pods (the next pod starts the next attempt), but the pods Kueue
// evicted still run their final flush, and the endpoint takes a write only
// from a node's recorded pod: such a pod counts as its node's while the
// binding is Pending/Preempted, it is an injected trainer pod of the job
// being deleted, and no newer pod holds its rank.
func (g *Gate) preemptedPod(ctx context.Context, wb *tetherv1.WorkerBinding, proven provenPod, pods map[int]string) (int, bool) {
	if wb.Status.Phase != tetherv1.PhasePending || wb.Status.Reason != tetherv1.ReasonPreempted {
		return 0, false
	}
	pod, err := g.pod(ctx, wb.Namespace, proven.name)
	if err != nil || pod.DeletionTimestamp == nil || !injectedPodOf(wb, pod, proven.uid) || !trainjob.IsInjected(pod) {
		return 0, false
	}
	r, ref := boundRank(wb, pod)
	if ref != nil || pods[int(r)] != "" {
		return 0, false
	}
	return int(r), true
}
