package ownwrites

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// firstStatusPriority is the work-queue priority of a new binding's first
// status: below every TrainJob still waiting for its token (a new one at
// 0, a replica's initial list at handler.LowPriority). A job's pods wait for
// its token Secret, not for the binding's status, so in a burst of new
// TrainJobs every token is issued before any first status is written: the
// status writes, each costing the API server about three plain creates
// (test/performance/controller's binding writes), no longer hold the next tokens back.
// With no burst the queue is empty and the status follows at once.
const firstStatusPriority = handler.LowPriority - 100

// FirstStatusNext is the result of the reconcile that created a binding and
// its token Secret: back at once for the first status, behind every token
// still to issue.
func FirstStatusNext() ctrl.Result {
	return ctrl.Result{RequeueAfter: time.Millisecond, Priority: ptr.To(firstStatusPriority)}
}

// EventHandler enqueues a WorkerBinding's TrainJob (of the same name) on
// the binding's watch events, as controller-runtime does (an initial list's
// at handler.LowPriority), but for the echo of this reconciler's own create,
// enqueued at firstStatusPriority: the reconcile that created the binding
// asked for its first status already (FirstStatusNext), and the echo would
// bring it back ahead of the TrainJobs still waiting for tokens. The echoes
// of other writes are enqueued: a final binding's pending artifacts that
// could not be dropped (a store outage) are dropped by the reconcile its
// final status's echo brings (a store outage
// under load left a pending object behind when these echoes were dropped
// too).
func (o *Tracker) EventHandler() handler.TypedFuncs[client.Object, reconcile.Request] {
	enqueue := func(obj client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok && o.Echo(e.Object) {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(firstStatusPriority)},
					reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
				return
			}
			enqueue(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			o.Deleted(client.ObjectKeyFromObject(e.Object))
			enqueue(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
	}
}
