package namespaceid

import (
	"context"
	"fmt"
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
