package jobidclaim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/namespaceid"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// A job id is the prefix of a job's artifacts in the one bucket every tenant
// shares, and the objects stay there after the job is gone. So an id that is
// not scoped to a namespace by its form (binding.JobIDScope: the ids Tether
// generates, which need no claim: the binding controller's scopedids.go) is claimed for good,
// cluster-wide, by the first TrainJob that binds it: one
// Lease per id in the control plane's namespace, which no tenant can write.
// Create is the atomic step (AlreadyExists is the refusal, so two TrainJobs
// racing for one id cannot both win), and the claim is never deleted by
// Tether (docs/platform.md, "The job id"). A Lease, not a ConfigMap or a CRD
// of its own: the control plane already holds get/create/update on Leases
// there, so a claim needs no new permission, and the manager's Lease cache
// selects replica Leases only, so claims cost no memory.
//
// The claim's labels and annotations are in api/names (Claim*).

// ClaimName is the name of jobID's claim Lease: from a hash, since an id may
// hold '_', which an object name may not.
func ClaimName(jobID string) string {
	h := sha256.Sum256([]byte(jobID))
	return "tether-job-id-" + hex.EncodeToString(h[:16])
}

// JobIDClaims claims job ids for TrainJobs.
type JobIDClaims struct {
	// Namespace is the control plane's: tenants hold no rights in it.
	Namespace string
	// Reader reads claims, TrainJobs and bindings from the API server, not
	// a cache: a claim decided on a stale read could hand an id over twice.
	Reader client.Reader
	// Writer creates and updates claims.
	Writer client.Writer

	// held remembers the claims this process saw held (TrainJob
	// namespace/name → holder and id), so a binding's every reconcile (each
	// status write is one) costs no uncached read: one per TrainJob per
	// process. Forgotten when the TrainJob is gone.
	held sync.Map
}

type heldClaim struct {
	uid   types.UID
	jobID string
}

// Forget drops what is remembered of TrainJob key (it is gone).
func (c *JobIDClaims) Forget(key types.NamespacedName) { c.held.Delete(key) }

// Holder is the TrainJob a claim names.
type Holder struct {
	Namespace, Name string
	UID             types.UID
	// NamespaceUID is the UID of the TrainJob's namespace ("" in a claim
	// of an earlier release, or not read yet).
	NamespaceUID types.UID
}

func (h Holder) String() string { return h.Namespace + "/" + h.Name }

// ClaimConflict says why a TrainJob may not have its job id.
type ClaimConflict struct {
	JobID string
	// Lease is the claim's name in Namespace.
	Lease, Namespace string
	// Holder is the holding TrainJob's namespace/name, told only to its own
	// namespace: another tenant's job names are not this tenant's to read.
	Holder string
	// HolderLive: the holding TrainJob or its binding still exists.
	HolderLive bool
	// EarlierNamespace: the holder was a TrainJob of an earlier namespace
	// of the same name, since deleted.
	EarlierNamespace bool
}

func (c *ClaimConflict) Error() string {
	if c.EarlierNamespace {
		return fmt.Sprintf("job id %q was claimed by a TrainJob of an earlier namespace named %s, since deleted; its artifacts stay in the bucket "+
			"under that id as that namespace's and are never handed to a later namespace of the same name. "+
			"Give this TrainJob another tether.dev/job-id, or none to get a generated one (the annotation cannot change, so recreate it). "+
			"To take the earlier namespace's artifacts back deliberately, a cluster operator hands the claim over: Lease %s in %s "+
			"(docs/platform.md, \"A deleted namespace\")", c.JobID, c.Holder, c.Lease, c.Namespace)
	}
	if c.Holder == "" {
		return fmt.Sprintf("job id %q is claimed for good by a TrainJob in another namespace (its artifacts are stored under that id); "+
			"give this TrainJob another tether.dev/job-id, or none to get a generated one (the annotation cannot change, so recreate it). "+
			"Only a cluster operator can release an id: Lease %s in %s (docs/platform.md, \"The job id\")", c.JobID, c.Lease, c.Namespace)
	}
	if c.HolderLive {
		return fmt.Sprintf("job id %q is held by TrainJob %s, which still exists (or its WorkerBinding does); "+
			"give this TrainJob another tether.dev/job-id, or delete %s first: its namespace may then reuse the id", c.JobID, c.Holder, c.Holder)
	}
	return fmt.Sprintf("job id %q is held by TrainJob %s", c.JobID, c.Holder)
}

// Claim makes jobID tj's. It returns nil once tj holds the claim, a
// *ClaimConflict when another TrainJob does, or an API error (a Conflict
// when another reconcile took the claim over first: retried).
//
// A claim held in another namespace is never handed over, nor one held in
// an earlier namespace of tj's namespace's name (another UID). One held in
// tj's namespace is taken over once its TrainJob and that TrainJob's
// binding are both gone (a resubmission by the id's owner), by an Update
// carrying the claim's resourceVersion, so two TrainJobs taking it over at
// once cannot both succeed.
//
// fresh says the claim is most likely free (a TrainJob not bound yet): it
// is created at once, and read only when that fails; otherwise (a binding
// that exists, after a restart) it is read first. tj.NamespaceUID is set
// when the caller read the namespace already; otherwise it is read from
// Reader when the claim must record or compare it.
func (c *JobIDClaims) Claim(ctx context.Context, jobID string, tj Holder, fresh bool) error {
	key := types.NamespacedName{Namespace: tj.Namespace, Name: tj.Name}
	if h, ok := c.held.Load(key); ok && h.(heldClaim) == (heldClaim{tj.UID, jobID}) {
		return nil
	}
	if err := c.claim(ctx, jobID, tj, fresh); err != nil {
		return err
	}
	c.held.Store(key, heldClaim{tj.UID, jobID})
	return nil
}

func (c *JobIDClaims) claim(ctx context.Context, jobID string, tj Holder, fresh bool) error {
	name := ClaimName(jobID)
	lease := &coordinationv1.Lease{}
	var err error
	if !fresh {
		err = c.Reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, lease)
	}
	var ns *namespaceid.Identity // read once, when needed
	namespace := func() (namespaceid.Identity, error) {
		if ns == nil {
			id, err := namespaceid.Get(ctx, c.Reader, tj.Namespace)
			if err != nil {
				return id, fmt.Errorf("claiming job id %q: %w", jobID, err)
			}
			ns = &id
		}
		return *ns, nil
	}
	if tj.NamespaceUID == "" && (fresh || apierrors.IsNotFound(err)) {
		id, err := namespace()
		if err != nil {
			return err
		}
		tj.NamespaceUID = id.UID
	}
	if fresh || apierrors.IsNotFound(err) {
		lease = newClaim(c.Namespace, name, jobID, tj)
		if err = c.Writer.Create(ctx, lease); err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("claiming job id %q (Lease %s/%s): %w", jobID, c.Namespace, name, err)
		}
		// Another TrainJob was first: judge its claim.
		lease = &coordinationv1.Lease{}
		err = c.Reader.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, lease)
	}
	if err != nil {
		return fmt.Errorf("reading the claim of job id %q (Lease %s/%s): %w", jobID, c.Namespace, name, err)
	}
	holder := holderOf(lease)
	switch {
	case holder.UID == tj.UID && holder.Namespace == tj.Namespace && holder.Name == tj.Name:
		if holder.NamespaceUID != "" {
			return nil
		}
		// A claim of an earlier release, held by this very TrainJob (its
		// UID is unique for good): it now records the namespace's UID.
		id, err := namespace()
		if err != nil {
			return err
		}
		tj.NamespaceUID = id.UID
		setHolder(lease, tj)
		if err := c.Writer.Update(ctx, lease); err != nil {
			return fmt.Errorf("recording namespace %s's UID in the claim of job id %q: %w", tj.Namespace, jobID, err)
		}
		return nil
	case holder.Namespace != tj.Namespace:
		return &ClaimConflict{JobID: jobID, Lease: name, Namespace: c.Namespace}
	}
	id, err := namespace()
	if err != nil {
		return err
	}
	if !sameNamespace(lease, holder, id) {
		return &ClaimConflict{JobID: jobID, Lease: name, Namespace: c.Namespace, Holder: holder.Namespace, EarlierNamespace: true}
	}
	tj.NamespaceUID = id.UID
	live, err := c.holderLive(ctx, holder, jobID)
	if err != nil {
		return err
	}
	if live {
		return &ClaimConflict{JobID: jobID, Lease: name, Namespace: c.Namespace, Holder: holder.String(), HolderLive: true}
	}
	setHolder(lease, tj)
	if err := c.Writer.Update(ctx, lease); err != nil {
		return fmt.Errorf("taking over the claim of job id %q from %s: %w", jobID, holder, err)
	}
	return nil
}

// holderLive: the holding TrainJob exists (same UID), or a binding of its
// name still holds the id (not yet garbage-collected, or orphaned).
func (c *JobIDClaims) holderLive(ctx context.Context, h Holder, jobID string) (bool, error) {
	key := types.NamespacedName{Namespace: h.Namespace, Name: h.Name}
	tj, err := trainjob.Get(ctx, c.Reader, key)
	switch {
	case err == nil && tj.GetUID() == h.UID:
		return true, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	wb := &tetherv1.WorkerBinding{}
	err = c.Reader.Get(ctx, key, wb)
	switch {
	case err == nil:
		return wb.Spec.JobID == jobID, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

// sameNamespace reports whether the claim l, held by h in a namespace of
// ns's name, was taken in ns itself rather than in an earlier namespace of
// that name. A claim of an earlier release names no namespace UID: it is
// ns's if ns existed when it was taken.
func sameNamespace(l *coordinationv1.Lease, h Holder, ns namespaceid.Identity) bool {
	if h.NamespaceUID != "" {
		return h.NamespaceUID == ns.UID
	}
	taken := l.CreationTimestamp.Time
	if l.Spec.AcquireTime != nil {
		taken = l.Spec.AcquireTime.Time
	}
	return !ns.Created.After(taken)
}

func newClaim(ns, name, jobID string, tj Holder) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{names.ClaimLabel: "true", names.ClaimJobIDLabel: jobID}}}
	setHolder(l, tj)
	return l
}

func setHolder(l *coordinationv1.Lease, tj Holder) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[names.ClaimNamespaceAnnotation], l.Annotations[names.ClaimNameAnnotation], l.Annotations[names.ClaimUIDAnnotation] =
		tj.Namespace, tj.Name, string(tj.UID)
	l.Annotations[names.ClaimNamespaceUIDAnnotation] = string(tj.NamespaceUID)
	holder := tj.String()
	l.Spec.HolderIdentity = &holder
	now := metav1.NowMicro()
	l.Spec.AcquireTime = &now
}

func holderOf(l *coordinationv1.Lease) Holder {
	a := l.Annotations
	return Holder{Namespace: a[names.ClaimNamespaceAnnotation], Name: a[names.ClaimNameAnnotation], UID: types.UID(a[names.ClaimUIDAnnotation]),
		NamespaceUID: types.UID(a[names.ClaimNamespaceUIDAnnotation])}
}
