package mutate

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

// TrainJobMutator decides which identity annotations a bound TrainJob gets.
type TrainJobMutator struct {
	// NewID returns a fresh id; nil means a random UUID. Tests make it deterministic.
	NewID func() string
	// Key returns the control plane's secret that worker ids are MACed
	// with (trainjob_workerid.go): every replica's must be the same (the
	// serving key of the shared certificate Secret). nil: an empty key,
	// for tests only.
	Key func() ([]byte, error)
	// NamespaceUID reads a namespace's UID from the API server (a scoped
	// job id carries its tag: binding.NamespaceTag). nil: the empty UID,
	// for tests only.
	NamespaceUID func(ctx context.Context, ns string) (string, error)
}

// Stamp returns the annotations to add to obj, a TrainJob at CREATE (old ==
// nil) or at UPDATE from old. It returns an error saying what is wrong when the
// object must be denied.
//
// The ids are checked whenever old carries them, bound or not: an UPDATE may
// not change one (not even while removing the bind label), and one it drops is
// restored. Settings are validated on bound objects only:
//   - at CREATE, and at an UPDATE that binds an object (old was not bound), all of them;
//   - at any other UPDATE, only those the UPDATE adds or changes: a value already
//     stored is not judged again, so an invalid one (e.g. stored before a stricter
//     release) does not block every later UPDATE. The pod webhook still denies
//     the job's pods, with the reason;
//   - never once the object is being deleted, so that its finalizers can be removed.
//
// Stamp is idempotent: on its own output it returns nothing to add.
func (m TrainJobMutator) Stamp(ctx context.Context, obj, old *metav1.ObjectMeta) (map[string]string, error) {
	var oldAnnotations map[string]string
	if old != nil {
		oldAnnotations = old.Annotations
	}
	bound := jobconfig.IsBound(obj.Labels)
	binds := bound && (old == nil || !jobconfig.IsBound(old.Labels))
	add := map[string]string{}
	for _, key := range []string{names.JobIDAnnotation, names.WorkerIDAnnotation} {
		cur, has := obj.Annotations[key]
		prev, had := oldAnnotations[key]
		switch {
		case had && has && cur != prev:
			// The id names the job's artifacts and its binding; changing it
			// would orphan both.
			return nil, fmt.Errorf("annotation %s is immutable once set: it is %q and cannot become %q; "+
				"to bind under another id, create a new TrainJob", key, prev, cur)
		case had && !has:
			// A replace that dropped the annotation: put it back rather than
			// silently re-identify the job.
			add[key] = prev
		case !has && bound && key == names.WorkerIDAnnotation:
			id, err := m.newWorkerID(obj.Namespace, jobIDOf(obj, add))
			if err != nil {
				return nil, err
			}
			add[key] = id
		case !has && bound:
			add[key] = m.newJobID(ctx, obj.Namespace)
		case has && key == names.JobIDAnnotation && bound && (!had || binds):
			// Set in this request, or bound now: an id scoped to another
			// namespace is that namespace's alone.
			if scope := binding.JobIDScope(cur); scope != "" && scope != obj.Namespace {
				return nil, fmt.Errorf("annotation %s=%q is scoped to namespace %q: "+binding.ScopedIDRule+", and Tether generates such ids. "+
					"Remove the annotation (in this request) to get a generated id, or choose an id of another form", key, cur, scope)
			}
			if err := m.checkOwnScopedID(ctx, obj.Namespace, cur); err != nil {
				return nil, err
			}
		case has && key == names.WorkerIDAnnotation && bound && (!had || binds):
			// Set in this request, or on an unbound TrainJob this webhook
			// never saw (its objectSelector): Tether's own stamp only.
			ok, err := m.tetherWorkerID(obj.Namespace, jobIDOf(obj, add), cur)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, presetWorkerIDError(cur)
			}
		}
	}
	if bound {
		if err := validateSettings(obj, old); err != nil {
			return nil, err
		}
	}
	return add, nil
}

// validateSettings validates a bound TrainJob's settings annotations as Stamp
// describes.
func validateSettings(obj, old *metav1.ObjectMeta) error {
	switch {
	case old == nil || !jobconfig.IsBound(old.Labels):
		_, err := jobconfig.Parse(obj.Annotations)
		return err
	case obj.DeletionTimestamp != nil || old.DeletionTimestamp != nil:
		return nil
	default:
		return jobconfig.ValidateUpdate(obj.Annotations, old.Annotations)
	}
}

// jobIDOf is obj's job id, or the one Stamp is adding.
func jobIDOf(obj *metav1.ObjectMeta, add map[string]string) string {
	if id, ok := add[names.JobIDAnnotation]; ok {
		return id
	}
	return obj.Annotations[names.JobIDAnnotation]
}

// newJobID returns a fresh job id for a TrainJob of namespace ns: scoped to
// it (binding.ScopedJobID), or a UUID, claimed cluster-wide like a chosen
// id, when ns is too long for a scoped id or its UID cannot be read now
// (the claim then names the namespace's UID).
func (m TrainJobMutator) newJobID(ctx context.Context, ns string) string {
	id := m.newID()
	nonce, ok := nonceOf(id, binding.ScopedNonceLen)
	if !ok {
		return id
	}
	uid, err := m.namespaceUID(ctx, ns)
	if err != nil {
		logf.FromContext(ctx).Info("generating a claimed job id: the namespace's UID for a scoped one is not readable", "namespace", ns, "error", err.Error())
		return id
	}
	if scoped := binding.ScopedJobID(ns, uid, nonce); scoped != "" {
		return scoped
	}
	return id
}

// checkOwnScopedID refuses a scoped job id of namespace ns that was not
// made for this namespace: one made for an earlier namespace of the same
// name (another tag), or of the untagged form of earlier releases, which
// cannot tell. Its artifacts, if any, are that namespace's. When the UID
// cannot be read now, the controller judges the id before binding it.
func (m TrainJobMutator) checkOwnScopedID(ctx context.Context, ns, id string) error {
	if binding.JobIDScope(id) != ns {
		return nil
	}
	uid, err := m.namespaceUID(ctx, ns)
	if err != nil || binding.ScopedJobIDBelongs(id, ns, uid) {
		return nil
	}
	return fmt.Errorf("annotation %s=%q names namespace %s but is not this namespace's (UID %s): %s; "+
		"remove the annotation (in this request) to get a generated id, or choose an id of another form",
		names.JobIDAnnotation, id, ns, uid, binding.ScopedIDOrigin(id))
}

func (m TrainJobMutator) namespaceUID(ctx context.Context, ns string) (string, error) {
	if m.NamespaceUID == nil {
		return "", nil
	}
	return m.NamespaceUID(ctx, ns)
}

// nonceOf returns the last n hex digits of id (a UUID without its dashes),
// the nonce of a generated job or worker id; ok is false, with what id
// holds, when that is shorter than n.
func nonceOf(id string, n int) (nonce string, ok bool) {
	nonce = strings.ReplaceAll(id, "-", "")
	if len(nonce) < n {
		return nonce, false
	}
	return nonce[len(nonce)-n:], true
}

func (m TrainJobMutator) newID() string {
	if m.NewID != nil {
		return m.NewID()
	}
	return uuid.NewString()
}
