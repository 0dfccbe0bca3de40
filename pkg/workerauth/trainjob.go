package workerauth

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// cacheLag is how young a binding may be for a TrainJob missing from this
// replica's cache to be looked up on the API server: another replica may
// have bound a TrainJob this one has not seen yet. An older binding whose
// TrainJob the cache lacks is orphaned.
const cacheLag = 30 * time.Second

// trainJobRefusal refuses wb's token unless its TrainJob exists, is the one
// that owns the binding and is not being deleted: a token lives no longer
// than its job, whatever the delete's cascade mode. It reads the control
// plane's TrainJob metadata cache, on whichever replica serves the request.
// A TrainJob it cannot read is a 503: the sidecar retries.
func (g *Gate) trainJobRefusal(ctx context.Context, wb *tetherv1.WorkerBinding) *Refusal {
	reason, msg, err := g.TrainJobGone(ctx, wb, &metav1.PartialObjectMetadata{})
	switch {
	case err != nil:
		return Refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "reading TrainJob %s: %v", wb.Spec.TrainJobName, err)
	case reason != "":
		return Refuse(http.StatusUnauthorized, binding.ErrUnauthorized, reason, "%s", msg)
	}
	return nil
}

// trainJobTypeMeta is the TrainJob's kind, formatted once (the liveness
// loop reads one TrainJob per worker per second).
var trainJobTypeMeta = func() metav1.TypeMeta {
	var t metav1.TypeMeta
	t.SetGroupVersionKind(trainjob.GVK)
	return t
}()

// readOnly reads the cache's own object, not a deep copy: for readers that
// change nothing and keep nothing (one slice for all, not one per call).
var readOnly = []client.GetOption{client.UnsafeDisableDeepCopy}

// TrainJobGone returns a metric reason and a message when wb's TrainJob no
// longer vouches for its token, and "" while it does. It reads the TrainJob
// into tj (the binding server's liveness loop reuses one, once per worker
// per second).
func (g *Gate) TrainJobGone(ctx context.Context, wb *tetherv1.WorkerBinding, tj *metav1.PartialObjectMetadata) (reason, msg string, err error) {
	var found *metav1.PartialObjectMetadata
	// The TrainJob is read for an ownerless binding too: an owner reference
	// removed by hand (on a cluster without the policy that forbids it) is
	// restored by the orphan reconciler, and the binding's own live
	// TrainJob still vouches for its token meanwhile (lifecycle.BindingOwner).
	// A live read decodes into tj: it starts empty, but for its kind.
	*tj = metav1.PartialObjectMetadata{TypeMeta: trainJobTypeMeta}
	key := client.ObjectKey{Namespace: wb.Namespace, Name: wb.Spec.TrainJobName}
	err = g.cache.Get(ctx, key, tj, readOnly...)
	// err != nil first: IsNotFound allocates even for a nil error.
	if err != nil && apierrors.IsNotFound(err) && g.live != nil && g.now().Sub(wb.CreationTimestamp.Time) < cacheLag && g.liveLookups.Allow() {
		err = g.live.Get(ctx, key, tj)
	}
	switch {
	case err == nil:
		found = tj
	case !apierrors.IsNotFound(err):
		return "", "", err
	}
	switch lifecycle.TrainJobOf(lifecycle.BindingOwner(wb, found), found) {
	case lifecycle.TrainJobOrphaned:
		return "trainjob_deleted", fmt.Sprintf("the binding's TrainJob %s/%s was deleted (the binding is orphaned): its token is no longer valid",
			wb.Namespace, wb.Spec.TrainJobName), nil
	case lifecycle.TrainJobMissing:
		return "trainjob_deleted", fmt.Sprintf("TrainJob %s/%s was deleted: its token is no longer valid", wb.Namespace, wb.Spec.TrainJobName), nil
	case lifecycle.TrainJobTerminating:
		return "trainjob_terminating", fmt.Sprintf("TrainJob %s/%s is being deleted: its token is no longer valid", wb.Namespace, wb.Spec.TrainJobName), nil
	}
	return "", "", nil
}
