package ownwrites

import (
	"bytes"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// ownWritesKept bounds how long a write is remembered: the cache has it
// within moments (its watch event), even from a loaded API server. Each
// remembered write holds a copy of the binding: the bound keeps them to the
// last seconds' writes.
const ownWritesKept = 5 * time.Second

// Tracker remembers the last WorkerBinding this reconciler wrote, per
// binding, until the manager's cache has caught up with it: read-your-writes
// over the cache (client-go's MutationCache, for one type). A reconcile that
// runs on the watch event of its own create, before the cache has the
// status written right after it, would otherwise compute that status again
// from the stale copy and lose the write to a conflict, then run again: in a
// burst of 2,000 new bindings, 0.6 status conflicts, 1.2 more Secret reads
// and 0.5 more Events per binding (test/performance/controller).
//
// Resource versions are compared as integers (apimachinery's
// CompareResourceVersion, KEP-5504); one that is not an integer is never
// taken for newer, and the cache is trusted.
type Tracker struct {
	mu sync.Mutex
	m  map[types.NamespacedName]ownWrite
	// secrets are the token Secrets this reconciler wrote, by TrainJob:
	// see secretFreshFor.
	secrets map[types.NamespacedName]ownWrite
	// verified marks the token Secrets last read or written, by TrainJob:
	// see secretVerifiedFor.
	verified map[types.NamespacedName]secretMark
	// ca is the CA bundle of the last Secret remembered, shared by the
	// others that carry the same (never written to: freshSecret copies).
	ca []byte
	// pruned is when expired entries were last dropped: a sweep of both
	// maps at most once per second keeps them to the last moments' writes
	// at a cost independent of how many bindings there are (a sweep on
	// every write of a full map cost a growth to 10,000 bindings twice the
	// control plane's CPU).
	pruned time.Time
}

// prune drops expired entries, at most once per second; o.mu is held.
func (o *Tracker) prune(now time.Time) {
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
		if !w.fresh(now) {
			delete(o.secrets, k)
		}
	}
	for k, m := range o.verified {
		if now.Sub(m.at) >= secretVerifiedFor {
			delete(o.verified, k)
		}
	}
}

// secretFreshFor is how long a token Secret this reconciler created or
// updated stands for the API server's: the reconciles right after a write
// do not read it again, which a burst of new bindings paid 2.5 times each
// (test/performance/controller). A new binding's Secret stands longer, until its
// first status (AwaitFirstStatus). A Secret deleted meanwhile is reissued
// at the first reconcile after the window. The window is short on purpose:
// a deleted Secret is reissued within seconds of the binding's next
// reconcile (the kubelet retries the pods' mount until then); a 15-s
// window held it back past what TestReissuedTokenOverlap allows. Secrets
// only read are not remembered: the periodic reconciles of every binding
// would keep a copy of each read.
const secretFreshFor = 3 * time.Second

type ownWrite struct {
	wb     *tetherv1.WorkerBinding
	secret *corev1.Secret
	at     time.Time
	// awaitsStatus: the Secret of a binding created with it whose first
	// status is not written yet (AwaitFirstStatus).
	awaitsStatus bool
}

// firstStatusKeptAtMost bounds how long a Secret awaiting its binding's
// first status is remembered past secretFreshFor: the first status comes
// after every token of a burst or sweep (firstStatusPriority), and a
// controller that never catches up reads the Secret again after it.
const firstStatusKeptAtMost = 10 * time.Minute

// fresh reports whether a remembered Secret still stands for the API
// server's at now.
func (w ownWrite) fresh(now time.Time) bool {
	age := now.Sub(w.at)
	return age < secretFreshFor || w.awaitsStatus && age < firstStatusKeptAtMost
}

// Wrote records wb as written now (its resourceVersion the API server's answer).
func (o *Tracker) Wrote(wb *tetherv1.WorkerBinding, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[types.NamespacedName]ownWrite{}
	}
	o.prune(now)
	o.m[types.NamespacedName{Namespace: wb.Namespace, Name: wb.Name}] = ownWrite{wb: wb.DeepCopy(), at: now}
}

// Latest returns cached, or a copy of this reconciler's own later write of
// the same binding when the cache does not have it yet.
func (o *Tracker) Latest(cached *tetherv1.WorkerBinding, now time.Time) *tetherv1.WorkerBinding {
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

// Created returns a copy of the binding this reconciler last wrote for
// TrainJob key, controlled by the TrainJob of uid owner, when the cache has
// none (yet): less than ownWritesKept ago, and not deleted since
// (deleted). Nil otherwise.
func (o *Tracker) Created(key types.NamespacedName, owner types.UID, now time.Time) *tetherv1.WorkerBinding {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prune(now)
	w, ok := o.m[key]
	if !ok || now.Sub(w.at) > ownWritesKept {
		return nil
	}
	if ref := metav1.GetControllerOf(w.wb); ref == nil || ref.UID != owner {
		return nil
	}
	return w.wb.DeepCopy()
}

// Deleted forgets the binding written for TrainJob key: a watch event
// showed it deleted.
func (o *Tracker) Deleted(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, key)
}

// Echo reports whether o, a WorkerBinding from a watch event, is this
// reconciler's last write of it or older (the same uid, a resourceVersion
// not after the write's): an event that brings nothing the write was not
// computed from, since a write is made over what came before it (an update
// conflicts otherwise).
func (o *Tracker) Echo(obj client.Object) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.m[types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}]
	if !ok || w.wb.UID != obj.GetUID() {
		return false
	}
	newer, err := resourceversion.CompareResourceVersion(obj.GetResourceVersion(), w.wb.ResourceVersion)
	return err == nil && newer <= 0
}

// Forget drops what is remembered of binding key (its TrainJob is gone).
func (o *Tracker) Forget(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, key)
	delete(o.secrets, key)
	delete(o.verified, key)
}

// WroteSecret records the token Secret of TrainJob key as written now:
// what the reconciler reads of it (its owner, data and resourceVersion),
// without its managedFields, and with one CA bundle shared by every
// Secret that carries the same (a burst's Secrets are remembered for
// secretFreshFor: 2,000 whole copies held 15 MiB).
func (o *Tracker) WroteSecret(key types.NamespacedName, s *corev1.Secret, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.secrets == nil {
		o.secrets = map[types.NamespacedName]ownWrite{}
	}
	o.prune(now)
	kept := s.DeepCopy()
	kept.ManagedFields = nil
	switch ca := kept.Data[names.CABundleKey]; {
	case ca == nil:
	case bytes.Equal(ca, o.ca):
		kept.Data[names.CABundleKey] = o.ca
	default:
		o.ca = ca
	}
	o.secrets[key] = ownWrite{secret: kept, at: now}
}

// FreshSecret returns a copy of TrainJob key's token Secret as this
// reconciler last wrote it, if that was less than secretFreshFor ago, else
// nil.
func (o *Tracker) FreshSecret(key types.NamespacedName, now time.Time) *corev1.Secret {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prune(now)
	w, ok := o.secrets[key]
	if !ok || !w.fresh(now) {
		delete(o.secrets, key)
		return nil
	}
	return w.secret.DeepCopy()
}

// AwaitFirstStatus keeps the Secret just created for TrainJob key's new
// binding remembered until the binding's first status is written
// (FirstStatusWritten), however long after secretFreshFor that comes: the
// reconcile that writes it, behind every token of a burst or a sweep, does
// not read the Secret again (1.2 reads per binding more in a sweep of
// 8,000 with a 15-s window and no such mark, test/performance/controller). A Secret
// Deleted meanwhile is reissued at the reconcile after that.
func (o *Tracker) AwaitFirstStatus(key types.NamespacedName) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.secrets[key]; ok {
		w.awaitsStatus = true
		o.secrets[key] = w
	}
}

// FirstStatusWritten ends awaitFirstStatus for TrainJob key, written at
// now, and reports whether it was awaited (once). The Secret stands for
// secretFreshFor more from now: the reconcile the status's own watch
// event brings does not read it either (1.00 GET per binding in a burst of
// 2,000, test/performance/controller); a Secret deleted since it was created is
// reissued at the reconcile after that.
func (o *Tracker) FirstStatusWritten(key types.NamespacedName, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.secrets[key]
	if !ok || !w.awaitsStatus || !w.fresh(now) {
		return false
	}
	w.awaitsStatus, w.at = false, now
	o.secrets[key] = w
	return true
}
