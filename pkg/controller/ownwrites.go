package controller

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// ownWritesKept bounds how long a write is remembered: the cache has it
// within moments (its watch event), even from a loaded API server. Each
// remembered write holds a copy of the binding: the bound keeps them to the
// last seconds' writes.
const ownWritesKept = 5 * time.Second

// ownWrites remembers the last WorkerBinding this reconciler wrote, per
// binding, until the manager's cache has caught up with it: read-your-writes
// over the cache (client-go's MutationCache, for one type). A reconcile that
// runs on the watch event of its own create, before the cache has the
// status written right after it, would otherwise compute that status again
// from the stale copy and lose the write to a conflict, then run again: in a
// burst of 2,000 new bindings, 0.6 status conflicts, 1.2 more Secret reads
// and 0.5 more Events per binding (bench/controller, stop 41).
//
// Resource versions are compared as integers (apimachinery's
// CompareResourceVersion, KEP-5504); one that is not an integer is never
// taken for newer, and the cache is trusted.
type ownWrites struct {
	mu sync.Mutex
	m  map[types.NamespacedName]ownWrite
	// secrets are the token Secrets this reconciler wrote, by TrainJob:
	// see secretFreshFor.
	secrets map[types.NamespacedName]ownWrite
	// pruned is when expired entries were last dropped: a sweep of both
	// maps at most once per second keeps them to the last moments' writes
	// at a cost independent of how many bindings there are (a sweep on
	// every write of a full map cost a growth to 10,000 bindings twice the
	// control plane's CPU).
	pruned time.Time
}

// prune drops expired entries, at most once per second; o.mu is held.
func (o *ownWrites) prune(now time.Time) {
	if now.Sub(o.pruned) < time.Second {
		return
	}
	o.pruned = now
	for k, w := range o.m {
		if now.Sub(w.at) > ownWritesKept {
			delete(o.m, k)
		}
	}
	for k, w := range o.secrets {
		if now.Sub(w.at) >= secretFreshFor {
			delete(o.secrets, k)
		}
	}
}

// secretFreshFor is how long a token Secret this reconciler created or
// updated stands for the API server's: the reconciles its own writes' watch
// events bring right after (the binding's create, its first status) do not
// read it again, which a burst of new bindings paid 2.5 times each
// (bench/controller). A Secret deleted meanwhile is noticed at the first
// reconcile after it: for a binding that waits for its pods, at
// createFailureFirstLook at the latest. Secrets only read are not
// remembered: the periodic reconciles of every binding would keep a copy of
// each read in the last seconds.
const secretFreshFor = 3 * time.Second

type ownWrite struct {
	wb     *tetherv1.WorkerBinding
	secret *corev1.Secret
	at     time.Time
}

// wrote records wb as written now (its resourceVersion the API server's answer).
func (o *ownWrites) wrote(wb *tetherv1.WorkerBinding, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[types.NamespacedName]ownWrite{}
	}
	o.prune(now)
	o.m[types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}] = ownWrite{wb: wb.DeepCopy(), at: now}
}

// latest returns cached, or a copy of this reconciler's own later write of
// the same binding when the cache does not have it yet.
func (o *ownWrites) latest(cached *tetherv1.WorkerBinding, now time.Time) *tetherv1.WorkerBinding {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prune(now)
	key := types.NamespacedName{Namespace: cached.Namespace, Name: cached.Name}
	w, ok := o.m[key]
	if !ok {
		return cached
	}
	newer, err := resourceversion.CompareResourceVersion(w.wb.ResourceVersion, cached.ResourceVersion)
	if err != nil || newer <= 0 || w.wb.UID != cached.UID || now.Sub(w.at) > ownWritesKept {
		// The cache caught up (or another writer was later): forgotten.
		delete(o.m, key)
		return cached
	}
	return w.wb.DeepCopy()
}

// forget drops what is remembered of binding key (its TrainJob is gone).
func (o *ownWrites) forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, key)
	delete(o.secrets, key)
}

// wroteSecret records the token Secret of TrainJob key as written now.
func (o *ownWrites) wroteSecret(key types.NamespacedName, s *corev1.Secret, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.secrets == nil {
		o.secrets = map[types.NamespacedName]ownWrite{}
	}
	o.prune(now)
	o.secrets[key] = ownWrite{secret: s.DeepCopy(), at: now}
}

// freshSecret returns a copy of TrainJob key's token Secret as this
// reconciler last wrote it, if that was less than secretFreshFor ago, else
// nil.
func (o *ownWrites) freshSecret(key types.NamespacedName, now time.Time) *corev1.Secret {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prune(now)
	w, ok := o.secrets[key]
	if !ok || now.Sub(w.at) >= secretFreshFor {
		delete(o.secrets, key)
		return nil
	}
	return w.secret.DeepCopy()
}
