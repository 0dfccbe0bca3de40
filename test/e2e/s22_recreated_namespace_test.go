package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// Scenario 22: a namespace's name is not its identity. Team A runs two jobs
// in namespace N, one with a chosen id of the recommended form
// (<namespace>-nightly) and one with a generated id, both to Succeeded with
// their artifacts verified in the store. N is deleted (the namespace
// controller removes its TrainJobs, bindings and Secrets; the objects stay
// in the bucket, as documented) and created again under the same name for
// team B (a ServiceAccount with only the namespace's RBAC), which submits
// TrainJobs naming both ids. Neither is bound: the
// generated id is refused at admission, the chosen one gets JobIDConflict
// saying it is an earlier namespace's; no token Secret is issued to B, and
// A's objects are as A left them.
func TestScenario22RecreatedNamespaceInheritsNothing(t *testing.T) {
	shared(t)
	timed(t)
	ctx := context.Background()
	ns := suite.newNamespace(t, "reborn")
	chosen := ns + "-nightly"
	plan := localcluster.TrainerPlan{Steps: 3, CheckpointEvery: 3, StepInterval: 300 * time.Millisecond}
	setPlans(ns, "nightly", plan)
	setPlans(ns, "adhoc", plan)
	nightly := bound(trainJob("nightly", ns)).Annotation(names.JobIDAnnotation, chosen).Queue("user-queue").Obj()
	suite.create(t, nightly)
	adhoc := bound(trainJob("adhoc", ns)).Queue("user-queue").Obj()
	suite.create(t, adhoc)
	generated := adhoc.Annotations[names.JobIDAnnotation]
	if binding.JobIDScope(generated) != ns {
		t.Fatalf("generated job id %q is not scoped to %s", generated, ns)
	}
	teamA := map[string]map[string]string{}
	for name, id := range map[string]string{"nightly": chosen, "adhoc": generated} {
		suite.waitBinding(t, ns, name, 90*time.Second, "team A's job Succeeded", phaseIs(tetherv1.PhaseSucceeded, ""))
		teamA[id] = suite.stored(t, id)
		if len(teamA[id]) == 0 {
			t.Fatalf("team A's job %s (id %q) stored nothing: the scenario would prove nothing", name, id)
		}
	}

	// N goes, with everything in it but the bucket's objects.
	if err := suite.c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 180*time.Second, "namespace "+ns+" deleted by the namespace controller", func() error {
		err := suite.c.Client.Get(ctx, types.NamespacedName{Name: ns}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	// Team B gets the name: a ServiceAccount holding only the namespace's
	// Role (an orchestrator's and an editor's rules).
	if err := suite.c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := suite.c.LocalQueue(ctx, ns, "user-queue"); err != nil {
		t.Fatal(err)
	}
	teamB, err := testenv.NewTenant(ctx, suite.c.Client, suite.c.Config, ns, nil)
	if err != nil {
		t.Fatal(err)
	}

	// The generated id: refused at admission, saying why.
	squatGenerated := bound(trainJob("adhoc", ns)).Annotation(names.JobIDAnnotation, generated).Queue("user-queue").Obj()
	err = teamB.Client.Create(ctx, squatGenerated)
	if err == nil {
		t.Errorf("team B's TrainJob with team A's generated id %q was admitted", generated)
	} else if !strings.Contains(err.Error(), "earlier namespace") {
		t.Errorf("team B's TrainJob with team A's generated id refused with %q: want it to say the id is an earlier namespace's", err)
	}

	// The chosen id: admitted, never bound, told why.
	if err := teamB.Client.Create(ctx, bound(trainJob("nightly", ns)).Annotation(names.JobIDAnnotation, chosen).Queue("user-queue").Obj()); err != nil {
		t.Fatalf("team B creating its TrainJob: %v", err)
	}
	eventually(t, 60*time.Second, "team B's TrainJob with team A's chosen id refused", func() error {
		if wb, err := suite.getBinding(ns, "nightly"); err == nil {
			return fmt.Errorf("bound to job id %q (phase %s): team B holds a token for team A's prefix", wb.Spec.JobID, wb.Status.Phase)
		}
		for _, ev := range suite.events(t, ns, "nightly") {
			if ev.Reason == tetherv1.ReasonJobIDConflict && ev.Type == corev1.EventTypeWarning {
				if !strings.Contains(ev.Note, "earlier namespace") {
					return fmt.Errorf("JobIDConflict %q does not say the id is an earlier namespace's", ev.Note)
				}
				logf("%s/nightly: team B sees: %s", ns, ev.Note)
				return nil
			}
		}
		return fmt.Errorf("no JobIDConflict Warning yet")
	})
	for _, name := range []string{"nightly", "adhoc"} {
		err := teamB.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName(name)}, &corev1.Secret{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("token Secret of team B's %s: %v, want none", name, err)
		}
	}
	for id, objects := range teamA {
		if now := suite.stored(t, id); !maps.Equal(now, objects) {
			t.Errorf("team A's objects under %q changed after team B's attempts: %v, were %v", id, now, objects)
		}
	}
}
