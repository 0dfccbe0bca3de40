package uploadsweep

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/controller/internal/keys"
	"github.com/tether-dev/tether/pkg/controller/internal/statuspatch"
	"github.com/tether-dev/tether/pkg/controller/internal/storeops"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// DefaultUploadSweepMargin is how long after its URLs expire a job's
// pending-upload prefix is swept a last time: clock skew between the store
// and the control plane and a replica's cache lagging behind the end of the
// binding (one minute), plus the longest a body the store accepted just
// before the URL expired may take to land: a 5 GiB single PUT at
// upload.MinCopyRate (640 s, the rate the commit's copy is given).
const DefaultUploadSweepMargin = time.Minute + 640*time.Second

// sweepPageRetry is how soon a sweep that left a full page comes back for
// the next one.
const sweepPageRetry = time.Second

// UploadSweeper removes what presigned direct-upload URLs write after their
// job's binding ended (Succeeded, Failed, or the binding deleted), and
// aborts the job's open multipart uploads: until every URL presigned for
// the job has expired, then once more, then never again. Requests are
// keyed by job id (Name; Namespace empty), so one sweep of a job runs at a
// time. The deadline is kept on the binding (status.directUploads), so it
// survives a restart and a change of elected replica; a deleted binding's
// is kept in memory, and after a restart the store's listing of job ids
// under upload.UploadsPrefix (direct uploads and multipart state records)
// stands for it (swept at the start and once more a full TTL plus margin
// later), and the store's open multipart uploads of jobs no live binding
// holds are aborted once.
type UploadSweeper struct {
	// Client reads WorkerBindings from the cache (by keys.JobIDIndex) and
	// patches their status.
	Client  client.Client
	Uploads storeops.DirectUploads
	// Margin is added to the URLs' TTL (0: DefaultUploadSweepMargin).
	Margin time.Duration
	// Workers is how many jobs are swept at once (0: 2).
	Workers int
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu sync.Mutex
	// gone holds the deadline of job ids no live binding holds any more.
	gone map[string]time.Time
	scan chan event.GenericEvent
}

func (s *UploadSweeper) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// window is how long after a binding's end its job's prefix is swept: the
// margin alone on a store that presigns nothing (SetupWithManager).
func (s *UploadSweeper) window() time.Duration {
	m := s.Margin
	if m <= 0 {
		m = DefaultUploadSweepMargin
	}
	return s.Uploads.DirectTTL() + m
}

// SetupWithManager registers the sweeper: WorkerBindings that end or go
// enqueue their job id, and so does the elected replica's scan of the
// store. It needs the binding controller's keys.JobIDIndex.
//
// A store that takes multipart uploads is swept even when it presigns
// nothing: an upload the endpoint started that nobody will complete is
// billed until it is aborted. Its bindings are swept as a presigning
// store's are, at their end and once more after the deadline, which is
// then the margin alone: a replica whose cache still saw the binding
// writable may start an upload, or write its record, after the first
// sweep. That keeps status.directUploads as the one truthful record of
// the sweep and costs each job two sweeps (a LIST of objects and a LIST of
// uploads each) and two status patches, once; a marker per upload would
// cost a write on every upload, and an upload whose marker was never
// written (a crash) would still need the sweep. On a presigning store only
// the LIST of uploads is new: every ended binding was swept already,
// whether or not it had direct uploads.
func (s *UploadSweeper) SetupWithManager(mgr ctrl.Manager) error {
	if s.Uploads == nil || (s.Uploads.DirectTTL() == 0 && !s.Uploads.StoresInParts()) {
		return nil // the store presigns nothing and stores nothing in parts
	}
	s.gone = map[string]time.Time{}
	s.scan = make(chan event.GenericEvent, 64)
	if err := mgr.Add(manager.RunnableFunc(s.scanStore)); err != nil {
		return err
	}
	workers := s.Workers
	if workers <= 0 {
		workers = 2
	}
	ended := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return endedBinding(e.Object) },
		// The end itself: the sweeper's own status patches come back as
		// updates of an ended binding, and need no sweep of their own.
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok := e.ObjectOld.(*tetherv1.WorkerBinding)
			return ok && !lifecycle.IsFinal(old.Status.Phase) && endedBinding(e.ObjectNew)
		},
		// A binding swept for good is gone with nothing left to sweep.
		DeleteFunc:  func(e event.DeleteEvent) bool { return !sweptBinding(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("upload-sweep").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Watches(&tetherv1.WorkerBinding{}, handler.EnqueueRequestsFromMapFunc(jobIDOf), builder.WithPredicates(ended)).
		WatchesRawSource(source.Channel(s.scan, handler.EnqueueRequestsFromMapFunc(
			func(_ context.Context, o client.Object) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
			}))).
		Complete(s)
}

func endedBinding(o client.Object) bool {
	wb, ok := o.(*tetherv1.WorkerBinding)
	return ok && lifecycle.IsFinal(wb.Status.Phase) && !sweptBinding(wb)
}

func sweptBinding(o client.Object) bool {
	wb, ok := o.(*tetherv1.WorkerBinding)
	return ok && wb.Status.DirectUploads != nil && wb.Status.DirectUploads.SweptTime != nil
}

func jobIDOf(_ context.Context, o client.Object) []reconcile.Request {
	wb, ok := o.(*tetherv1.WorkerBinding)
	if !ok || wb.Spec.JobID == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: wb.Spec.JobID}}}
}

// scanStore enqueues every job id with objects under the uploads prefix,
// when this replica is elected and again once every URL presigned before
// has expired: a binding deleted while no replica was elected left no
// other trace, and its URLs may still write. On the first pass (the
// second too if that failed) it aborts the uploads no live binding holds
// (abortUnownedUploads).
func (s *UploadSweeper) scanStore(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("upload-sweep")
	aborted := false
	for pass := 0; pass < 2; pass++ {
		if pass == 1 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(s.window()):
			}
		}
		err := s.Uploads.UploadJobs(ctx, func(jobID string) error {
			o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: jobID}}
			select {
			case s.scan <- event.GenericEvent{Object: o}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if err != nil && ctx.Err() == nil {
			// The bindings that exist are swept anyway; only a binding
			// deleted while no replica was elected waits for the backstop.
			log.Error(err, "listing the jobs with direct uploads in the store", "pass", pass)
		}
		if !aborted {
			aborted = s.abortUnownedUploads(ctx, log)
		}
	}
	return nil
}

// abortUnownedUploads aborts the store's open multipart uploads whose job
// no live binding holds, and says whether it could list them: an upload
// the endpoint started and crashed before recording leaves no trace under
// the uploads prefix, and a binding deleted (or ended and swept) while no
// replica was elected is never swept again. A binding neither final nor
// being deleted may still write: its uploads stay.
func (s *UploadSweeper) abortUnownedUploads(ctx context.Context, log logr.Logger) bool {
	if !s.Uploads.StoresInParts() {
		return true
	}
	n, err := s.Uploads.AbortUnownedUploads(ctx, func(jobID string) (bool, error) {
		var list tetherv1.WorkerBindingList
		if err := s.Client.List(ctx, &list, client.MatchingFields{keys.JobIDIndex: jobID}); err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(wb tetherv1.WorkerBinding) bool {
			return wb.DeletionTimestamp == nil && !lifecycle.IsFinal(wb.Status.Phase)
		}), nil
	})
	if n > 0 {
		log.Info("aborted open multipart uploads no live binding holds", "uploads", n)
	}
	if err != nil && ctx.Err() == nil {
		log.Error(err, "aborting the open multipart uploads no live binding holds")
		return false
	}
	return true
}

// Reconcile sweeps one job's pending-upload prefix and open multipart
// uploads (req.Name is the job id).
func (s *UploadSweeper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	jobID := req.Name
	var list tetherv1.WorkerBindingList
	if err := s.Client.List(ctx, &list, client.MatchingFields{keys.JobIDIndex: jobID}); err != nil {
		return ctrl.Result{}, err
	}
	now := s.now()
	s.mu.Lock()
	gone, known := s.gone[jobID]
	s.mu.Unlock()
	plan := planSweep(list.Items, now, s.window(), gone, known)
	log := logf.FromContext(ctx).WithValues("jobID", jobID)
	switch plan.action {
	case sweepNone:
		s.forget(jobID)
		return ctrl.Result{}, nil
	case sweepGone:
		if !known {
			s.mu.Lock()
			s.gone[jobID] = plan.deadline
			s.mu.Unlock()
		}
	}
	for _, wb := range plan.record {
		if err := s.patchStatus(ctx, wb, &tetherv1.DirectUploadsStatus{ExpireTime: metav1.NewTime(plan.deadline)}); err != nil {
			return ctrl.Result{}, err
		}
	}
	n, more, err := s.Uploads.SweepUploads(ctx, jobID, pending.UploadSweepPage)
	if n > 0 {
		log.Info("removed direct uploads and aborted multipart uploads of a job whose binding ended", "count", n, "until", plan.deadline.UTC().Format(time.RFC3339))
	}
	switch {
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("sweeping the direct uploads of job %s: %w", jobID, err)
	case more:
		return ctrl.Result{RequeueAfter: sweepPageRetry}, nil
	case now.Before(plan.deadline):
		// Back at the deadline for the last sweep.
		return ctrl.Result{RequeueAfter: plan.deadline.Sub(now) + time.Second}, nil
	}
	// This sweep began after the deadline: nothing can land any more.
	s.forget(jobID)
	swept := metav1.NewTime(s.now())
	for _, wb := range plan.final {
		st := &tetherv1.DirectUploadsStatus{ExpireTime: metav1.NewTime(plan.deadline), SweptTime: &swept}
		if d := wb.Status.DirectUploads; d != nil {
			if d.SweptTime != nil {
				continue
			}
			st.ExpireTime = d.ExpireTime
		}
		if err := s.patchStatus(ctx, wb, st); err != nil {
			return ctrl.Result{}, err
		}
	}
	log.V(1).Info("direct and multipart uploads swept for good", "deadline", plan.deadline.UTC().Format(time.RFC3339))
	return ctrl.Result{}, nil
}

func (s *UploadSweeper) forget(jobID string) {
	s.mu.Lock()
	delete(s.gone, jobID)
	s.mu.Unlock()
}

// patchStatus merge-patches status.directUploads alone: the other writers
// of the status (the binding controller, the binding server) are not
// overwritten, and theirs, from an older copy, conflict with this one.
func (s *UploadSweeper) patchStatus(ctx context.Context, wb *tetherv1.WorkerBinding, st *tetherv1.DirectUploadsStatus) error {
	patched := wb.DeepCopy()
	patched.Status.DirectUploads = st
	if err := s.Client.Status().Patch(ctx, patched, statuspatch.For(wb, patched)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

// sweepAction is what planSweep decided for a job id.
type sweepAction int

const (
	// sweepNone: nothing to do (a live binding may still commit uploads,
	// or the ended binding's last sweep is done).
	sweepNone sweepAction = iota
	// sweepEnded: the job's live bindings have all ended.
	sweepEnded
	// sweepGone: no live binding holds the job id any more.
	sweepGone
)

// sweepPlan is planSweep's answer.
type sweepPlan struct {
	action sweepAction
	// deadline is when the last sweep may begin.
	deadline time.Time
	// record are the ended bindings whose deadline is not recorded yet;
	// final all the ended bindings (their sweep is recorded on each).
	record, final []*tetherv1.WorkerBinding
}

// planSweep decides from the bindings that hold a job id whether its
// pending uploads may be swept, and until when. A binding being deleted is
// gone. Any other binding not yet Succeeded or Failed may still commit: no
// sweep. Ended bindings keep their deadline in status.directUploads, set
// the first time (now + window: no URL is presigned after the binding
// ended, which happened before now); done once every one records its last
// sweep. With no binding left the deadline is goneAt if known, else now +
// window (the binding went before now).
func planSweep(bindings []tetherv1.WorkerBinding, now time.Time, window time.Duration, goneAt time.Time, known bool) sweepPlan {
	var p sweepPlan
	done := true
	for i := range bindings {
		wb := &bindings[i]
		if wb.DeletionTimestamp != nil {
			continue
		}
		if !lifecycle.IsFinal(wb.Status.Phase) {
			return sweepPlan{action: sweepNone}
		}
		p.final = append(p.final, wb)
		d := wb.Status.DirectUploads
		if d == nil {
			p.record = append(p.record, wb)
			done = false
			p.deadline = later(p.deadline, now.Add(window))
			continue
		}
		done = done && d.SweptTime != nil
		p.deadline = later(p.deadline, d.ExpireTime.Time)
	}
	switch {
	case len(p.final) > 0 && done:
		return sweepPlan{action: sweepNone}
	case len(p.final) > 0:
		p.action = sweepEnded
		if known {
			// A binding deleted meanwhile held the id too.
			p.deadline = later(p.deadline, goneAt)
		}
		return p
	case known:
		return sweepPlan{action: sweepGone, deadline: goneAt}
	}
	return sweepPlan{action: sweepGone, deadline: now.Add(window)}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
