package orphan

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controller/internal/keys"
	"github.com/tether-dev/tether/pkg/controller/internal/storeops"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// terminatingRecheck is how often a binding whose TrainJob is being deleted
// is looked at again: with --cascade=orphan the TrainJob waits for the
// garbage collector, then is gone.
const terminatingRecheck = 2 * time.Second

// Reconciler finalizes a binding whose TrainJob is gone: any cascade
// mode can leave it behind (--cascade=orphan keeps the WorkerBinding and its
// token Secret with their ownerReferences removed; a background delete keeps
// them until the garbage collector gets to them). The binding becomes
// Failed/TrainJobDeleted, its pending artifacts are dropped and its token
// Secret is deleted. The binding server refuses the token on its own as soon
// as the TrainJob is terminating or gone; this makes the binding say so and
// removes the credential.
//
// A missing owner reference alone is not a gone TrainJob: while the
// TrainJob the binding was made for lives, the reference is put back
// (restoreOwner). The admission policy refuses its removal by anyone but
// the control plane and the garbage collector; this covers an install
// without the policy.
type Reconciler struct {
	// Client reads WorkerBindings and TrainJob metadata from the cache and
	// writes status and deletes Secrets.
	Client client.Client
	// Live reads from the API server: a TrainJob the cache does not have is
	// confirmed gone there, and token Secrets are never cached.
	Live    client.Reader
	Events  events.EventRecorder
	Pending storeops.PendingArtifacts
}

// SetupWithManager watches WorkerBindings and TrainJob metadata (a deleted
// TrainJob enqueues the binding of the same name).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainjob.GVK)
	return ctrl.NewControllerManagedBy(mgr).
		Named("orphaned-workerbinding").
		For(&tetherv1.WorkerBinding{}).
		WatchesMetadata(tj, handler.EnqueueRequestsFromMapFunc(keys.SameName), builder.OnlyMetadata).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	wb := &tetherv1.WorkerBinding{}
	if err := r.Client.Get(ctx, req.NamespacedName, wb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if wb.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	state, restore, err := r.trainJobState(ctx, wb)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case restore != nil:
		return ctrl.Result{}, r.restoreOwner(ctx, wb, restore)
	case state == lifecycle.TrainJobTerminating:
		return ctrl.Result{RequeueAfter: terminatingRecheck}, nil
	case !state.Gone():
		return ctrl.Result{}, nil
	}
	log := logf.FromContext(ctx)
	msg := fmt.Sprintf("TrainJob %s/%s was deleted while its binding remained; the token is revoked", wb.Namespace, wb.Spec.TrainJobName)
	changed := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fresh := &tetherv1.WorkerBinding{}
		if err := r.Live.Get(ctx, req.NamespacedName, fresh); err != nil {
			return err
		}
		if changed = lifecycle.TrainJobDeleted(&fresh.Status, msg); !changed {
			wb = fresh
			return nil
		}
		lifecycle.SetOutcomeConditions(&fresh.Status, fresh.Generation)
		if err := r.Client.Status().Update(ctx, fresh); err != nil {
			return err
		}
		wb = fresh
		return nil
	})
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if changed {
		log.Info("binding finalized: its TrainJob is gone", "binding", req.String())
		if r.Events != nil {
			r.Events.Eventf(wb, nil, corev1.EventTypeWarning, lifecycle.ReasonTrainJobDeleted, lifecycle.EventAction, "%s", msg)
		}
	}
	if r.Pending != nil && wb.Status.Phase == tetherv1.PhaseFailed {
		if _, err := r.Pending.DropPending(ctx, wb.Spec.JobID); err != nil {
			log.Error(err, "dropping the pending artifacts of a binding whose TrainJob is gone")
		}
	}
	return ctrl.Result{}, r.deleteSecret(ctx, wb)
}

// trainJobState reads the binding's TrainJob and says what it is to the
// binding (lifecycle.TrainJobOf, the rule the binding server applies to its
// token). A binding without an owner reference is judged by the TrainJob of
// its name too (lifecycle.BindingOwner): the garbage collector removes the
// reference for --cascade=orphan, but so can anyone holding patch on
// WorkerBindings, and a live TrainJob the binding was made for is not gone.
// restore is that TrainJob when its reference is to be put back.
func (r *Reconciler) trainJobState(ctx context.Context, wb *tetherv1.WorkerBinding) (state lifecycle.TrainJobState, restore *metav1.PartialObjectMetadata, err error) {
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainjob.GVK)
	key := types.NamespacedName{Namespace: wb.Namespace, Name: wb.Spec.TrainJobName}
	err = r.Client.Get(ctx, key, tj)
	if apierrors.IsNotFound(err) {
		// The cache may lag behind a TrainJob created a moment ago.
		err = r.Live.Get(ctx, key, tj)
	}
	switch {
	case apierrors.IsNotFound(err):
		return lifecycle.TrainJobOf(lifecycle.TrainJobOwner(wb), nil), nil, nil
	case err != nil:
		return lifecycle.TrainJobLive, nil, err
	}
	owner := lifecycle.BindingOwner(wb, tj)
	state = lifecycle.TrainJobOf(owner, tj)
	if state == lifecycle.TrainJobLive && lifecycle.TrainJobOwner(wb) == "" {
		return state, tj, nil
	}
	return state, nil, nil
}

// restoreOwner puts back the controller reference of a binding whose
// TrainJob lives (removed by a user's patch of its metadata), so that it is
// collected with its TrainJob and the binding controller keeps serving it.
// Other owner references stay, but none may claim to be its controller.
// The write carries the binding's resourceVersion: a change meanwhile (the
// garbage collector's own) wins, and the binding is looked at again.
func (r *Reconciler) restoreOwner(ctx context.Context, wb *tetherv1.WorkerBinding, tj *metav1.PartialObjectMetadata) error {
	orig := wb.DeepCopy()
	refs := []metav1.OwnerReference{{APIVersion: trainjob.GVK.GroupVersion().String(), Kind: trainjob.GVK.Kind,
		Name: tj.Name, UID: tj.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	for _, o := range wb.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			refs = append(refs, o)
		}
	}
	wb.OwnerReferences = refs
	if err := r.Client.Patch(ctx, wb, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return nil // the change that raced this one is reconciled next
		}
		return client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("restored the owner reference of a binding whose TrainJob lives (it was removed from the binding's metadata)",
		"binding", client.ObjectKeyFromObject(wb).String(), "trainJobUID", tj.UID)
	return nil
}

// deleteSecret deletes the binding's token Secret unless a live TrainJob
// owns it (a new TrainJob of the same name has its own).
func (r *Reconciler) deleteSecret(ctx context.Context, wb *tetherv1.WorkerBinding) error {
	name := wb.Spec.TokenSecretName
	if name == "" {
		name = binding.TokenSecretName(wb.Spec.TrainJobName)
	}
	s := &corev1.Secret{}
	if err := r.Live.Get(ctx, types.NamespacedName{Namespace: wb.Namespace, Name: name}, s); err != nil {
		return client.IgnoreNotFound(err)
	}
	if s.Type != names.TokenSecretType || s.DeletionTimestamp != nil {
		return nil
	}
	for _, o := range s.OwnerReferences {
		if o.Kind != trainjob.GVK.Kind {
			continue
		}
		tj := &metav1.PartialObjectMetadata{}
		tj.SetGroupVersionKind(trainjob.GVK)
		err := r.Live.Get(ctx, types.NamespacedName{Namespace: wb.Namespace, Name: o.Name}, tj)
		if err == nil && tj.UID == o.UID {
			return nil // a live TrainJob's Secret
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	uid := s.UID
	if err := r.Client.Delete(ctx, s, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the token Secret %s of a binding whose TrainJob is gone: %w", name, err)
	}
	logf.FromContext(ctx).Info("deleted the token Secret of a binding whose TrainJob is gone", "secret", name)
	return nil
}
