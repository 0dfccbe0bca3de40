package workerbinding

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// scopedIDHolders remembers which TrainJob this process is binding under each
// scoped job id (binding.JobIDScope). A scoped id has no claim Lease: no
// other namespace may hold it, but two TrainJobs of its own namespace given
// one id at once (a copied annotation) would both pass the cache's check
// (jobIDOwner) before either binding is in it. Reserving the id here first
// gives them the claim's guarantee: one is bound. Only the elected replica
// binds, and it starts with every earlier binding in its cache.
type scopedIDHolders struct {
	mu     sync.Mutex
	byID   map[string]jobidclaim.Holder
	byName map[types.NamespacedName]string // holder → id, to forget it
}

// reserve records h as jobID's holder and returns "", or returns the
// namespace/name of another TrainJob that holds it and still exists.
func (s *scopedIDHolders) reserve(ctx context.Context, cache client.Reader, jobID string, h jobidclaim.Holder) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID, s.byName = map[string]jobidclaim.Holder{}, map[types.NamespacedName]string{}
	}
	if prev, ok := s.byID[jobID]; ok && prev != h && s.exists(ctx, cache, prev) {
		return prev.String()
	}
	s.byID[jobID] = h
	s.byName[types.NamespacedName{Namespace: h.Namespace, Name: h.Name}] = jobID
	return ""
}

// exists reports whether h's TrainJob is still there (the cache's view; a
// read error counts as there, so the id is not handed over on a guess).
func (s *scopedIDHolders) exists(ctx context.Context, cache client.Reader, h jobidclaim.Holder) bool {
	// The binding controller's own TrainJob cache (unstructured): h's
	// reconcile read h from it, so it has h unless h was deleted. (The
	// metadata cache is another informer, which may not have h yet.)
	tj, err := trainjob.Get(ctx, cache, types.NamespacedName{Namespace: h.Namespace, Name: h.Name})
	if err != nil {
		return client.IgnoreNotFound(err) != nil
	}
	return tj.GetUID() == h.UID && tj.GetDeletionTimestamp() == nil
}

// forget drops what TrainJob key held (it is gone).
func (s *scopedIDHolders) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.byName[key]; ok {
		delete(s.byName, key)
		if s.byID[id].Namespace == key.Namespace && s.byID[id].Name == key.Name {
			delete(s.byID, id)
		}
	}
}
