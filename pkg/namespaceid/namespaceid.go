package namespaceid

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Identity is what tells a namespace from every other that held or will
// hold its name.
type Identity struct {
	Name string
	UID  types.UID
	// Created is the namespace's creationTimestamp: a record made before it
	// (a claim of an earlier release, which names no UID) is an earlier
	// namespace's.
	Created time.Time
}

// Get reads namespace name's identity from r. r should be a live reader
// (the API server): a cache that has not yet seen a namespace deleted and
// made again would answer with the earlier one's UID, and the decisions
// taken on it are for good. Only the metadata is read.
func Get(ctx context.Context, r client.Reader, name string) (Identity, error) {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Get(ctx, types.NamespacedName{Name: name}, ns); err != nil {
		return Identity{}, fmt.Errorf("reading namespace %s: %w", name, err)
	}
	if ns.DeletionTimestamp != nil {
		// Nothing new is bound in a namespace on its way out, and its
		// successor must not be mistaken for it.
		return Identity{}, &TerminatingError{Name: name}
	}
	return Identity{Name: name, UID: ns.UID, Created: ns.CreationTimestamp.Time}, nil
}

// TerminatingError says the namespace is being deleted.
type TerminatingError struct{ Name string }

func (e *TerminatingError) Error() string {
	return fmt.Sprintf("namespace %s is being deleted", e.Name)
}

// Recent remembers the namespace UIDs it read for a short while: for the
// TrainJob webhook, which tags the ids it generates and checks the ones it
// is given (a read per bound TrainJob created cost the API server a third
// more per TrainJob). A UID remembered past a namespace's deletion and
// re-creation under its name can only make the webhook tag an id for the
// earlier namespace or let such an id through, and the controller, which
// reads the namespace live before it binds, refuses it: the webhook's
// answer is a courtesy, the controller's the rule.
type Recent struct {
	// Live reads a namespace that is not remembered.
	Live client.Reader
	// TTL is how long a UID is remembered.
	TTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu   sync.Mutex
	uids map[string]recentUID
}

type recentUID struct {
	uid  types.UID
	read time.Time
}

// maxRecent bounds what Recent remembers: past it, it forgets everything
// (a burst across that many namespaces within TTL reads them again).
const maxRecent = 4096

// UID returns namespace name's UID, remembered or read live.
func (r *Recent) UID(ctx context.Context, name string) (types.UID, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	r.mu.Lock()
	if u, ok := r.uids[name]; ok && now().Sub(u.read) < r.TTL {
		r.mu.Unlock()
		return u.uid, nil
	}
	r.mu.Unlock()
	id, err := Get(ctx, r.Live, name)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.uids == nil || len(r.uids) >= maxRecent {
		r.uids = map[string]recentUID{}
	}
	r.uids[name] = recentUID{uid: id.UID, read: now()}
	return id.UID, nil
}
