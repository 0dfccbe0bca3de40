package workerbinding

import (
	"context"
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/pkg/namespaceid"
)

// conflictRecheck is how soon a TrainJob refused its job id looks again
// (the holder may be deleted, or an operator may release the id).
const conflictRecheck = time.Minute

// checkIdentity refuses to serve a TrainJob whose identity is not its own:
// a job id claimed by another TrainJob (or held by another live binding), or
// a binding whose recorded ids are not the TrainJob's annotations. A refused
// TrainJob gets a Warning and nothing else: no binding, no token, no status
// write. refused is false when the reconcile goes on.
func (r *Reconciler) checkIdentity(ctx context.Context, tj *unstructured.Unstructured, wb *tetherv1.WorkerBinding,
	jobID, workerID string) (res ctrl.Result, refused bool, err error) {
	if wb != nil && (wb.Spec.JobID != jobID || wb.Spec.WorkerID != workerID) {
		// The binding's ids are immutable (CRD) and the annotations are too
		// (TrainJob webhook): only a bypassed webhook gets here. The binding
		// keeps its own, claimed prefix; the TrainJob is not served under
		// either id until someone looks.
		r.warn(tj, tetherv1.ReasonIdentityMismatch,
			"WorkerBinding %s records job id %q and worker id %q, but the TrainJob's %s/%s are %q/%q; Tether serves no token for it. "+
				"Restore the annotations to the binding's values, or delete and recreate the TrainJob",
			wb.Name, wb.Spec.JobID, wb.Spec.WorkerID, names.JobIDAnnotation, names.WorkerIDAnnotation, jobID, workerID)
		return ctrl.Result{}, true, nil
	}
	scope := binding.JobIDScope(jobID)
	holder := jobidclaim.Holder{Namespace: tj.GetNamespace(), Name: tj.GetName(), UID: tj.GetUID()}
	if wb == nil {
		if scope != "" && scope != tj.GetNamespace() {
			// Only a bypassed webhook gets here: the id is another
			// namespace's by its form, and it has no claim to refuse it.
			r.warn(tj, tetherv1.ReasonJobIDConflict, "job id %q is scoped to namespace %q ("+binding.ScopedIDRule+"); Tether serves no token for it. "+
				"Recreate this TrainJob without %s to get a generated id, or with an id of another form", jobID, scope, names.JobIDAnnotation)
			return ctrl.Result{}, true, nil
		}
		// An id is its namespace's, not its name's: a first binding is
		// judged against the namespace as the API server has it now.
		ns, res, refused, err := r.namespaceOf(ctx, tj)
		if refused || err != nil {
			return res, refused, err
		}
		holder.NamespaceUID = ns.UID
		if scope != "" && !binding.ScopedJobIDBelongs(jobID, ns.Name, string(ns.UID)) {
			r.warn(tj, tetherv1.ReasonJobIDConflict, "job id %q names this namespace, but %s; Tether serves no token for it. "+
				"Recreate this TrainJob without %s to get a generated id, or with an id of another form (docs/platform.md, \"A deleted namespace\")",
				jobID, binding.ScopedIDOrigin(jobID), names.JobIDAnnotation)
			return ctrl.Result{}, true, nil
		}
		// Bindings of a release before claims (or of a race it allowed)
		// hold ids without a claim until their next reconcile: they win.
		other, err := r.jobIDOwner(ctx, jobID, tj)
		if err != nil {
			return ctrl.Result{}, true, err
		}
		if other == "" && scope != "" {
			// A scoped id has no claim: a binding made a moment ago by
			// this process may not be in the cache yet.
			other = r.scopedIDs.reserve(ctx, r.Client, jobID, holder)
		}
		if other != "" {
			// Another tenant's job names are not this tenant's to read.
			holder := "a TrainJob in another namespace"
			if ns, _, _ := strings.Cut(other, "/"); ns == tj.GetNamespace() {
				holder = "TrainJob " + other
			}
			r.warn(tj, tetherv1.ReasonJobIDConflict, "job id %q is already bound by %s; set a unique %s on this TrainJob, or none to get a generated one (it cannot change once set, so recreate it)",
				jobID, holder, names.JobIDAnnotation)
			return ctrl.Result{RequeueAfter: conflictRecheck}, true, nil
		}
	}
	if r.Claims == nil || (scope != "" && scope == tj.GetNamespace()) {
		// A scoped id is its namespace's by its form: no claim to take.
		return ctrl.Result{}, false, nil
	}
	err = r.Claims.Claim(ctx, jobID, holder, wb == nil)
	var conflict *jobidclaim.ClaimConflict
	switch {
	case errors.As(err, &conflict):
		r.warn(tj, tetherv1.ReasonJobIDConflict, "%s", conflict.Error())
		return ctrl.Result{RequeueAfter: conflictRecheck}, true, nil
	case err != nil:
		return ctrl.Result{}, true, err
	}
	return ctrl.Result{}, false, nil
}

// namespaceOf reads tj's namespace's identity from the API server, in a
// read that began after this reconcile asked (namespaceid.Shared: in a
// burst, the reconciles asking at once share it). A namespace being
// deleted binds nothing new (refused, looked at again later, by when the
// TrainJob is most likely gone with it).
func (r *Reconciler) namespaceOf(ctx context.Context, tj *unstructured.Unstructured) (namespaceid.Identity, ctrl.Result, bool, error) {
	r.namespacesOnce.Do(func() { r.namespaces.Live = r.Live })
	ns, err := r.namespaces.Get(ctx, tj.GetNamespace())
	var terminating *namespaceid.TerminatingError
	if errors.As(err, &terminating) {
		return ns, ctrl.Result{RequeueAfter: conflictRecheck}, true, nil
	}
	return ns, ctrl.Result{}, err != nil, err
}
