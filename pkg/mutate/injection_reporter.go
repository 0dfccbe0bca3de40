package mutate

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tether-dev/tether/pkg/trainjob"
)

// announceWindow: a new leader announces injected pods created up to this
// long before it started, so that pods created during a failover are not
// missed; a pod in that window may be announced by both leaders.
const announceWindow = time.Minute

// InjectionReporter announces injections that happened. The pod webhook only
// returns a patch: Pod Security, a ResourceQuota or a later webhook may still
// refuse the pod, so the webhook neither records "Injected" nor counts it.
// The reporter does, once the API server has created the pod: the leader's
// pod informer sees a trainer pod that carries the sidecar
// (trainjob.IsInjected), records the Normal Injected Event on its TrainJob
// and counts tether_pods_injected_total.
type InjectionReporter struct {
	Cache     cache.Cache
	TrainJobs client.Reader
	Recorder  events.EventRecorder

	mu   sync.Mutex
	seen map[types.UID]bool
}

var _ manager.LeaderElectionRunnable = (*InjectionReporter)(nil)

// NeedLeaderElection implements manager.LeaderElectionRunnable: one replica
// announces.
func (r *InjectionReporter) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable.
func (r *InjectionReporter) Start(ctx context.Context) error {
	r.seen = map[types.UID]bool{}
	since := time.Now().Add(-announceWindow)
	inf, err := r.Cache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && !pod.CreationTimestamp.Time.Before(since) {
				r.observe(ctx, pod)
			}
		},
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return inf.RemoveEventHandler(reg)
}

// observe announces pod if it is an injected trainer pod not announced yet.
func (r *InjectionReporter) observe(ctx context.Context, pod *corev1.Pod) {
	name, ok := trainjob.IsTrainerPod(pod)
	if !ok || !trainjob.IsInjected(pod) {
		return
	}
	r.mu.Lock()
	if r.seen[pod.UID] {
		r.mu.Unlock()
		return
	}
	r.seen[pod.UID] = true
	r.mu.Unlock()
	podsInjected.Inc()
	if r.Recorder == nil {
		return
	}
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainjob.GVK)
	var uid types.UID
	if err := r.TrainJobs.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, tj); err == nil {
		uid = tj.UID
	} else {
		logf.FromContext(ctx).V(1).Info("injected pod's TrainJob not found; Event without its UID", "namespace", pod.Namespace, "pod", pod.Name, "error", err.Error())
	}
	r.Recorder.Eventf(trainjob.Ref(pod.Namespace, name, uid), nil, corev1.EventTypeNormal, string(ReasonInjected), eventAction,
		"pod %s was created with the Tether sidecar", pod.Name)
}
