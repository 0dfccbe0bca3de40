package binding

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// What an earlier namespace of a name leaves behind (its claims, its scoped
// ids, the artifacts under them) is never a later namespace's of the same
// name. envtest runs no namespace controller, so a namespace cannot be
// deleted and made again here (e2e scenario 22 does it, as the attack);
// these tests put the leftovers in place as the earlier namespace would
// have left them: a claim Lease naming another namespace UID, a claim of
// an earlier release naming none but taken before the namespace existed,
// and scoped ids made for another UID or of the untagged form.

// namespaceUID is ns's UID as the API server has it.
func namespaceUID(t *testing.T, ns string) (types.UID, time.Time) {
	t.Helper()
	n := &corev1.Namespace{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Name: ns}, n); err != nil {
		t.Fatal(err)
	}
	return n.UID, n.CreationTimestamp.Time
}

// leftClaim creates the claim Lease of id as a TrainJob of namespace ns
// with namespace UID nsUID ("" for a claim of an earlier release) would
// have, taken at acquired.
func leftClaim(t *testing.T, id, ns string, nsUID types.UID, acquired time.Time) {
	t.Helper()
	holder := ns + "/nightly"
	at := metav1.NewMicroTime(acquired)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tether-system", Name: jobidclaim.ClaimName(id),
			Labels: map[string]string{names.ClaimLabel: "true", names.ClaimJobIDLabel: id},
			Annotations: map[string]string{names.ClaimNamespaceAnnotation: ns, names.ClaimNameAnnotation: "nightly",
				names.ClaimUIDAnnotation: "5c0e9b1e-0000-4000-8000-00000000e001"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &at},
	}
	if nsUID != "" {
		l.Annotations[names.ClaimNamespaceUIDAnnotation] = string(nsUID)
	}
	if err := env.Client.Create(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

// refusedAsEarlier waits for TrainJob ns/name to be refused its job id,
// and checks the Warning says why and that no token was issued.
func refusedAsEarlier(t *testing.T, tn *testenv.Tenant, name string) {
	t.Helper()
	if wb := boundOrRefused(t, tn.Namespace, name); wb != nil {
		t.Fatalf("TrainJob %s was bound to job id %q, which an earlier namespace named %s claimed", name, wb.Spec.JobID, tn.Namespace)
	}
	note, err := jobIDConflict(tn.Namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the tenant sees: %s", note)
	if !strings.Contains(note, "earlier namespace") {
		t.Errorf("Warning %q: want it to say the id is an earlier namespace's", note)
	}
	err = tn.Client.Get(context.Background(), types.NamespacedName{Namespace: tn.Namespace, Name: binding.TokenSecretName(name)}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("token Secret of %s: %v, want none", name, err)
	}
}

// A claim naming another UID of this namespace's name is an earlier
// namespace's, as is a claim of an earlier release taken before this
// namespace was created: neither is handed over.
func TestClaimOfAnEarlierNamespaceIsNotInherited(t *testing.T) {
	tn := newTenant(t, "reborn-claim")
	_, created := namespaceUID(t, tn.Namespace)

	withUID := uniq("reborn-nightly")
	leftClaim(t, withUID, tn.Namespace, "5c0e9b1e-0000-4000-8000-0000000000aa", created.Add(-time.Hour))
	submit(t, tn, "nightly", withUID)
	refusedAsEarlier(t, tn, "nightly")

	untagged := uniq("reborn-weekly")
	leftClaim(t, untagged, tn.Namespace, "", created.Add(-time.Hour))
	submit(t, tn, "weekly", untagged)
	refusedAsEarlier(t, tn, "weekly")
}

// A claim of an earlier release taken in this very namespace (after it was
// created) whose TrainJob is gone is the namespace's own: a resubmission is
// bound, and the claim now records the namespace's UID.
func TestClaimOfAnEarlierReleaseStaysItsNamespaces(t *testing.T) {
	tn := newTenant(t, "upgraded-claim")
	uid, created := namespaceUID(t, tn.Namespace)
	id := uniq("upgraded-nightly")
	leftClaim(t, id, tn.Namespace, "", created.Add(2*time.Second))
	submit(t, tn, "nightly", id)
	if j := bound(t, tn, "nightly"); j.jobID != id {
		t.Fatalf("bound as %q, want %q", j.jobID, id)
	}
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: "tether-system", Name: jobidclaim.ClaimName(id)}, lease); err != nil {
		t.Fatal(err)
	}
	if got := lease.Annotations[names.ClaimNamespaceUIDAnnotation]; got != string(uid) {
		t.Errorf("claim of %q records namespace UID %q, want %q", id, got, uid)
	}
}

// A scoped id naming this namespace but made for another of its name, or
// of the untagged form of earlier releases, is refused at admission, saying
// why; one made for this namespace binds.
func TestScopedIDOfAnEarlierNamespaceIsRefused(t *testing.T) {
	ctx := context.Background()
	tn := newTenant(t, "reborn-scoped")
	uid, _ := namespaceUID(t, tn.Namespace)
	for _, tc := range []struct{ id, want string }{
		{binding.ScopedJobID(tn.Namespace, "5c0e9b1e-0000-4000-8000-0000000000bb", "0123456789abcdef"), "earlier namespace"},
		{tn.Namespace + "_0123456789abcdef", "untagged form"},
	} {
		tj := testobj.MakeTrainJob("model", tn.Namespace).Bound().Annotation(names.JobIDAnnotation, tc.id).Obj()
		err := tn.Client.Create(ctx, tj)
		if err == nil {
			j := bound(t, tn, "model")
			t.Fatalf("TrainJob created with job id %q and bound as %q", tc.id, j.jobID)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create with job id %q refused with %q: want it to say %q", tc.id, err, tc.want)
		}
	}
	own := binding.ScopedJobID(tn.Namespace, string(uid), "0123456789abcdef")
	submit(t, tn, "model", own)
	if j := bound(t, tn, "model"); j.jobID != own {
		t.Fatalf("bound as %q, want %q", j.jobID, own)
	}
}
