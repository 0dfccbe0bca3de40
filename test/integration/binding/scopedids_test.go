package binding

import (
	"context"
	"fmt"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// Generated job ids are scoped to their namespace (binding.JobIDScope) and
// take no claim Lease. Tenant A's TrainJob with a generated id is deleted
// while its objects stay in the bucket; tenant B, holding only its own
// namespace's RBAC, submits a TrainJob with A's id, at CREATE and by adding
// the label to an unbound TrainJob: both refused by the API server, saying
// why, and B's token never reaches A's objects.
func TestTenantCannotTakeAGeneratedJobID(t *testing.T) {
	ctx := context.Background()
	a, b := newTenant(t, "scoped-owner"), newTenant(t, "scoped-squatter")
	submit(t, a, "model", "")
	owner := bound(t, a, "model")
	if binding.JobIDScope(owner.jobID) != a.Namespace {
		t.Fatalf("generated job id %q is not scoped to %s", owner.jobID, a.Namespace)
	}
	// No claim: the id is A's by its form.
	err := env.Client.Get(ctx, types.NamespacedName{Namespace: "tether-system", Name: jobidclaim.ClaimName(owner.jobID)}, &coordinationv1.Lease{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("claim Lease of the scoped id %q: %v, want none", owner.jobID, err)
	}
	owner.store(t, owner.jobID+"/model.bin", []byte("A's weights"))
	gone(t, a, "model")

	tj := testobj.MakeTrainJob("model", b.Namespace).Bound().Annotation(names.JobIDAnnotation, owner.jobID).Obj()
	err = b.Client.Create(ctx, tj)
	if err == nil {
		squatter := bound(t, b, "model")
		code, _ := squatter.object(t, owner.jobID+"/model.bin", nil)
		t.Fatalf("B's TrainJob was created with A's job id %q and bound as %q: B's token HEADs A's model.bin: %d", owner.jobID, squatter.jobID, code)
	}
	if !strings.Contains(err.Error(), "scoped to namespace") {
		t.Errorf("B's create refused with %q: want it to say the id is scoped to another namespace", err)
	}
	// The label added to an unbound TrainJob that already carries the id
	// (the webhook sees only bound TrainJobs at CREATE).
	unbound := testobj.MakeTrainJob("later", b.Namespace).Annotation(names.JobIDAnnotation, owner.jobID).Obj()
	if err := b.Client.Create(ctx, unbound); err != nil {
		t.Fatalf("creating an unbound TrainJob: %v", err)
	}
	unbound.SetLabels(map[string]string{names.BindLabel: names.BindValue})
	if err := b.Client.Update(ctx, unbound); err == nil || !strings.Contains(err.Error(), "scoped to namespace") {
		t.Errorf("binding an unbound TrainJob that carries A's id: %v, want refused as scoped to another namespace", err)
	}
}

// Two TrainJobs of one namespace given one generated id at the same moment
// (a copied annotation): exactly one is bound, as with a claimed id,
// although a scoped id has no claim to race for.
func TestTwoTrainJobsWithOneScopedIDAtOnceGetOneBinding(t *testing.T) {
	tn := newTenant(t, "scoped-race")
	uid, _ := namespaceUID(t, tn.Namespace)
	for trial := range 3 {
		id := binding.ScopedJobID(tn.Namespace, string(uid), strings.Repeat(string(rune('a'+trial)), binding.ScopedNonceLen))
		live := submitAtOnce(t, tn, id, fmt.Sprintf("copy-a-%d", trial), fmt.Sprintf("copy-b-%d", trial))
		if len(live) != 1 {
			t.Errorf("trial %d: scoped job id %q has %d live bindings (%v), want exactly 1", trial, id, len(live), live)
		}
	}
}
