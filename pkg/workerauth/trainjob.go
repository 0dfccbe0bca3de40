package server

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
func (s *Server) trainJobRefusal(ctx context.Context, wb *tetherv1.WorkerBinding) *refusal {
	reason, msg, err := s.trainJobGone(ctx, wb, &metav1.PartialObjectMetadata{})
	switch {
	case err != nil:
		return refuse(http.StatusServiceUnavailable, binding.ErrUnavailable, "unavailable", "reading TrainJob %s: %v", wb.Spec.TrainJobName, err)
	case reason != "":
		return refuse(http.StatusUnauthorized, binding.ErrUnauthorized, reason, "%s", msg)
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

// trainJobGone returns a metric reason and a message when wb's TrainJob no
// longer vouches for its token, and "" while it does. It reads the TrainJob
// into tj (the liveness loop reuses one).
func (s *Server) trainJobGone(ctx context.Context, wb *tetherv1.WorkerBinding, tj *metav1.PartialObjectMetadata) (reason, msg string, err error) {
	owner := lifecycle.TrainJobOwner(wb)
	var found *metav1.PartialObjectMetadata
	if owner != "" { // an orphaned binding is answered without a read
		// A live read decodes into tj: it starts empty, but for its kind.
		*tj = metav1.PartialObjectMetadata{TypeMeta: trainJobTypeMeta}
		key := client.ObjectKey{Namespace: wb.Namespace, Name: wb.Spec.TrainJobName}
		err = s.cache.Get(ctx, key, tj, readOnly...)
		// err != nil first: IsNotFound allocates even for a nil error.
		if err != nil && apierrors.IsNotFound(err) && s.live != nil && s.opts.Now().Sub(wb.CreationTimestamp.Time) < cacheLag && s.liveLookups.Allow() {
			err = s.live.Get(ctx, key, tj)
		}
		switch {
		case err == nil:
			found = tj
		case !apierrors.IsNotFound(err):
			return "", "", err
		}
	}
	switch lifecycle.TrainJobOf(owner, found) {
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

// revokedWithTrainJob closes the worker's session with CloseRevoked and
// forgets the worker when its binding's TrainJob is gone or terminating
// (the liveness check, every second on every replica).
func (s *Server) revokedWithTrainJob(ctx context.Context, st stateSnapshot, wb *tetherv1.WorkerBinding, tj *metav1.PartialObjectMetadata) bool {
	reason, msg, err := s.trainJobGone(ctx, wb, tj)
	if err != nil || reason == "" {
		return false
	}
	if st.session != nil {
		st.session.close(binding.CloseRevoked, msg)
		s.metrics.refusals.WithLabelValues(reason).Inc()
	}
	s.hub.forget(st.key)
	return true
}
