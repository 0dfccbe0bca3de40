package binding

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/jobidclaim"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// Attack tests of tenant isolation: each tenant is a ServiceAccount holding
// only its namespace's Role (the orchestrator rules of docs/orchestrator.md
// and a namespace editor's), against the control plane running as its own
// ServiceAccount under the RBAC and the admission policy manifests/ ships.

// tenantJob is a bound TrainJob a tenant created, with its token.
type tenantJob struct {
	tenant *testenv.Tenant
	name   string
	jobID  string
	token  string
	ca     []byte
	// podUID and podToken are the job's node-0 pod's, which the Job
	// controller created, as its sidecar sends them.
	podName, podUID, podToken string
}

// tenancyRun makes the namespaces and ids of each run their own (-count):
// claims outlive the TrainJobs, as they should.
var tenancyRun int

func uniq(s string) string { return fmt.Sprintf("%s-%d", s, tenancyRun) }

func newTenant(t *testing.T, ns string) *testenv.Tenant {
	t.Helper()
	tenancyRun++
	tn, err := env.NewTenant(context.Background(), uniq(ns), nil)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// submit creates TrainJob name as the tenant (with job id jobID, if not "").
func submit(t *testing.T, tn *testenv.Tenant, name, jobID string) {
	t.Helper()
	tw := testobj.MakeTrainJob(name, tn.Namespace).Bound()
	if jobID != "" {
		tw.Annotation(names.JobIDAnnotation, jobID)
	}
	if err := tn.Client.Create(context.Background(), tw.Obj()); err != nil {
		t.Fatalf("tenant %s creating TrainJob %s: %v", tn.Namespace, name, err)
	}
}

// bound waits for the tenant's TrainJob name to be bound and reads its
// token Secret as the tenant.
func bound(t *testing.T, tn *testenv.Tenant, name string) *tenantJob {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{}
	eventually(t, 20*time.Second, func() error {
		return tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: binding.TokenSecretName(name)}, secret)
	})
	wb := &tetherv1.WorkerBinding{}
	if err := tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: name}, wb); err != nil {
		t.Fatal(err)
	}
	pod := testobj.MakeTrainerPod(name, tn.Namespace).Routed().Obj()
	if err := jobController(t).Create(ctx, pod); err != nil {
		t.Fatalf("creating tenant %s's trainer pod as the Job controller: %v", tn.Namespace, err)
	}
	podToken, err := testenv.PodToken(ctx, clientset(t), pod)
	if err != nil {
		t.Fatal(err)
	}
	return &tenantJob{tenant: tn, name: name, jobID: wb.Spec.JobID, token: string(secret.Data[names.TokenKey]), ca: secret.Data[names.CABundleKey],
		podName: pod.Name, podUID: string(pod.UID), podToken: podToken}
}

func (j *tenantJob) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(j.ca)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
}

// object sends a PUT (body not nil) or a HEAD of key with the job's token
// and returns the status and the answer's body.
func (j *tenantJob) object(t *testing.T, key string, body []byte) (int, string) {
	t.Helper()
	method, r := http.MethodHead, io.Reader(nil)
	if body != nil {
		method, r = http.MethodPut, bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, env.BindingURL+"/"+upload.Bucket+"/"+key, r)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set(names.HeaderArtifactToken, j.token)
	req.Header.Set(names.HeaderArtifactPodUID, j.podUID)
	req.Header.Set(names.HeaderPodToken, j.podToken)
	resp, err := j.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// store PUTs key with the job's own token, as its sidecar would: retried
// while the binding server has not yet seen the new binding (401).
func (j *tenantJob) store(t *testing.T, key string, body []byte) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if code, msg := j.object(t, key, body); code != http.StatusOK {
			return fmt.Errorf("%s's own PUT of %s: %d %s", j.tenant.Namespace, key, code, msg)
		}
		return nil
	})
}

// read GETs path of binding ns/name through the orchestrator read endpoint
// as the tenant's user.
func (j *tenantJob) read(t *testing.T, ns, name, path string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, env.BindingURL+"/orchestrator/v1/namespaces/"+ns+"/workerbindings/"+name+"/objects/"+path, nil)
	req.Header.Set("Authorization", "Bearer "+j.tenant.Token)
	req.Header.Set("X-Tether-Stream", "true")
	resp, err := j.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// jobIDConflict returns the note of the JobIDConflict Warning Event on
// TrainJob ns/name.
func jobIDConflict(ns, name string) (string, error) {
	const reason = tetherv1.ReasonJobIDConflict
	var list eventsv1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return "", err
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
			return e.Note, nil
		}
	}
	return "", fmt.Errorf("no %s Warning on TrainJob %s/%s", reason, ns, name)
}

// gone deletes TrainJob ns/name and its WorkerBinding
// and its token Secret, the latter two as the garbage collector would
// (envtest runs no kube-controller-manager).
func gone(t *testing.T, tn *testenv.Tenant, name string) {
	t.Helper()
	ctx := context.Background()
	if err := tn.Client.Delete(ctx, testobj.MakeTrainJob(name, tn.Namespace).Obj()); err != nil {
		t.Fatal(err)
	}
	wb := &tetherv1.WorkerBinding{}
	wb.Namespace, wb.Name = tn.Namespace, name
	secret := &corev1.Secret{}
	secret.Namespace, secret.Name = tn.Namespace, binding.TokenSecretName(name)
	deleteBoth := func() error {
		for _, o := range []client.Object{wb, secret} {
			if err := env.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	}
	if err := deleteBoth(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(wb), &tetherv1.WorkerBinding{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		// A reconcile that still had the TrainJob in its cache may have bound
		// it again; its objects are owned by the deleted TrainJob, and the
		// garbage collector would delete them too.
		if err := deleteBoth(); err != nil {
			return err
		}
		return fmt.Errorf("binding %s/%s still there: %v", tn.Namespace, name, err)
	})
}

// submitAtOnce creates TrainJobs names in tn with job id jobID at the same
// moment and returns those that were bound (the others refused).
func submitAtOnce(t *testing.T, tn *testenv.Tenant, jobID string, names ...string) (live []string) {
	t.Helper()
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() { submit(t, tn, name, jobID) })
	}
	wg.Wait()
	for _, name := range names {
		if wb := boundOrRefused(t, tn.Namespace, name); wb != nil {
			live = append(live, name)
		}
	}
	return live
}

// boundOrRefused waits until TrainJob ns/name has a binding or a
// JobIDConflict Warning, and returns the binding (nil when refused).
func boundOrRefused(t *testing.T, ns, name string) *tetherv1.WorkerBinding {
	t.Helper()
	var wb *tetherv1.WorkerBinding
	eventually(t, 20*time.Second, func() error {
		b := &tetherv1.WorkerBinding{}
		err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, b)
		switch {
		case err == nil:
			wb = b
			return nil
		case !apierrors.IsNotFound(err):
			return err
		}
		_, err = jobIDConflict(ns, name)
		return err
	})
	return wb
}

// A tenant that holds patch on its WorkerBindings (to send commands) tries
// to point its own binding at another tenant's job id, and to change its
// token hash: the API server refuses both, saying why, and the tenant's
// token still reaches only its own prefix.
func TestTenantCannotRetargetItsBindingToAnotherJobID(t *testing.T) {
	ctx := context.Background()
	victimTenant, attackerTenant := newTenant(t, "victim-edit"), newTenant(t, "attacker-edit")
	submit(t, victimTenant, "model", "")
	victim := bound(t, victimTenant, "model")
	victim.store(t, victim.jobID+"/model.bin", []byte("the victim's weights"))
	submit(t, attackerTenant, "job", "")
	attacker := bound(t, attackerTenant, "job")

	own := &tetherv1.WorkerBinding{}
	own.Namespace, own.Name = attackerTenant.Namespace, "job"
	patch := func(spec string) error {
		return attackerTenant.Client.Patch(ctx, own, client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`)))
	}
	for _, c := range []struct{ spec, want string }{
		{`{"jobID":"` + victim.jobID + `"}`, "spec.jobID is immutable"},
		{`{"jobID":"` + victim.jobID + `/x"}`, "spec.jobID"},
		{`{"tokenSHA256":"` + strings.Repeat("a", 64) + `"}`, "written by Tether's control plane only"},
		{`{"previousToken":{"sha256":"` + strings.Repeat("b", 64) + `","validUntil":"2099-01-01T00:00:00Z"}}`, "written by Tether's control plane only"},
	} {
		err := patch(c.spec)
		if err == nil {
			t.Errorf("the tenant's patch of its binding's spec %s was accepted", c.spec)
			continue
		}
		t.Logf("patch %s: %v", c.spec, err)
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("patch %s: %v, want refused with %q", c.spec, err, c.want)
		}
	}
	wb := &tetherv1.WorkerBinding{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(own), wb); err != nil {
		t.Fatal(err)
	}
	if wb.Spec.JobID != attacker.jobID {
		t.Errorf("the attacker's binding now has job id %q (was %q)", wb.Spec.JobID, attacker.jobID)
	}
	// Whatever the API server did, the attacker's token must not reach
	// the victim's objects.
	eventually(t, 5*time.Second, func() error {
		if code, _ := attacker.object(t, victim.jobID+"/model.bin", nil); code != http.StatusForbidden {
			return fmt.Errorf("the attacker's token HEADs the victim's model.bin: %d, want 403", code)
		}
		return nil
	})
	if code := attacker.read(t, attackerTenant.Namespace, "job", "model.bin"); code == http.StatusOK {
		t.Errorf("the attacker reads the victim's model.bin through its own binding: %d", code)
	}
	// What the orchestrator Role's patch is for still works: a command.
	if err := attackerTenant.Client.Patch(ctx, own, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"tether.dev/command":"flush:1"}}}`))); err != nil {
		t.Errorf("the tenant's command annotation was refused: %v", err)
	}
}

// Tenant A's TrainJob with a chosen job id is deleted while its objects stay
// in the bucket; tenant B then submits a TrainJob with that id. B is
// refused, and B's token (if it got one) reaches none of A's objects.
func TestTenantCannotClaimAJobIDAfterItsOwnerIsDeleted(t *testing.T) {
	a, b := newTenant(t, "claim-owner"), newTenant(t, "claim-squatter")
	id := uniq("team-model")
	submit(t, a, "model", id)
	owner := bound(t, a, "model")
	owner.store(t, id+"/model.bin", []byte("A's weights"))
	gone(t, a, "model")

	submit(t, b, "model", id)
	wb := boundOrRefused(t, b.Namespace, "model")
	if wb != nil {
		squatter := bound(t, b, "model")
		code, _ := squatter.object(t, id+"/model.bin", nil)
		read := squatter.read(t, b.Namespace, "model", "model.bin")
		t.Fatalf("B's TrainJob was bound to A's job id %q: B's token HEADs A's model.bin: %d; B's user reads it: %d", wb.Spec.JobID, code, read)
	}
	note, err := jobIDConflict(b.Namespace, "model")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("B sees: %s", note)
	if !strings.Contains(note, "another namespace") || strings.Contains(note, a.Namespace) {
		t.Errorf("B's Warning %q: want it to say the id is claimed in another namespace, without naming A's", note)
	}
	// Nothing was issued to B.
	err = b.Client.Get(context.Background(), types.NamespacedName{Namespace: b.Namespace, Name: binding.TokenSecretName("model")}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("B's token Secret: %v, want none", err)
	}
	// The claim still names A's TrainJob.
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: "tether-system", Name: jobidclaim.ClaimName(id)}, lease); err != nil {
		t.Fatal(err)
	}
	if got := lease.Annotations[names.ClaimNamespaceAnnotation]; got != a.Namespace {
		t.Errorf("claim of %q held by namespace %q, want %q", id, got, a.Namespace)
	}
}

// Two tenants create TrainJobs with one job id at the same moment: exactly
// one is bound.
func TestTwoTrainJobsWithOneJobIDAtOnceGetOneBinding(t *testing.T) {
	c, d := newTenant(t, "race-c"), newTenant(t, "race-d")
	for trial := range 3 {
		id, name := uniq(fmt.Sprintf("race-id-%d", trial)), fmt.Sprintf("job-%d", trial)
		var wg sync.WaitGroup
		for _, tn := range []*testenv.Tenant{c, d} {
			wg.Go(func() { submit(t, tn, name, id) })
		}
		wg.Wait()
		var live []string
		for _, tn := range []*testenv.Tenant{c, d} {
			if wb := boundOrRefused(t, tn.Namespace, name); wb != nil {
				live = append(live, tn.Namespace)
			}
		}
		if len(live) != 1 {
			t.Errorf("trial %d: job id %q has %d live bindings (%v), want exactly 1", trial, id, len(live), live)
		}
	}
}

// The owner of a chosen job id deletes its TrainJob and submits it again in
// the same namespace: bound again to its id. While the first one lives, a
// second TrainJob of the same namespace is refused, told which one holds it.
func TestOwnerResubmissionIsBoundToItsJobIDAgain(t *testing.T) {
	tn := newTenant(t, "resubmit")
	id := uniq("nightly-finetune")
	submit(t, tn, "nightly", id)
	first := bound(t, tn, "nightly")
	if first.jobID != id {
		t.Fatalf("bound as %q, want %q", first.jobID, id)
	}
	submit(t, tn, "nightly-copy", id)
	if wb := boundOrRefused(t, tn.Namespace, "nightly-copy"); wb != nil {
		t.Fatalf("a second live TrainJob got job id %q", wb.Spec.JobID)
	}
	if note, _ := jobIDConflict(tn.Namespace, "nightly-copy"); !strings.Contains(note, tn.Namespace+"/nightly") {
		t.Errorf("Warning %q: want it to name the holder %s/nightly", note, tn.Namespace)
	}
	if err := tn.Client.Delete(context.Background(), testobj.MakeTrainJob("nightly-copy", tn.Namespace).Obj()); err != nil {
		t.Fatal(err)
	}

	gone(t, tn, "nightly")
	submit(t, tn, "nightly", id)
	again := bound(t, tn, "nightly")
	if again.jobID != id {
		t.Fatalf("resubmission bound as %q, want %q", again.jobID, id)
	}
	if again.token == first.token {
		t.Error("the resubmission got the first TrainJob's token")
	}
}

// Two resubmissions of one id in its owner's namespace, at the same moment,
// once the holder is gone: the takeover is one update carrying the claim's
// resourceVersion, so exactly one is bound.
func TestTwoResubmissionsAtOnceTakeTheClaimOnce(t *testing.T) {
	tn := newTenant(t, "resubmit-race")
	id := uniq("weekly")
	submit(t, tn, "weekly", id)
	bound(t, tn, "weekly")
	gone(t, tn, "weekly")
	live := submitAtOnce(t, tn, id, "weekly-a", "weekly-b")
	if len(live) != 1 {
		t.Fatalf("job id %q has %d live bindings after two takeovers at once (%v), want exactly 1", id, len(live), live)
	}
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: "tether-system", Name: jobidclaim.ClaimName(id)}, lease); err != nil {
		t.Fatal(err)
	}
	if got := lease.Annotations[names.ClaimNameAnnotation]; got != live[0] {
		t.Errorf("claim held by %q, want the bound %q", got, live[0])
	}
}

// A binding made by a release without claims (here: its claim deleted)
// claims its id when the control plane starts, and then holds it against
// another namespace.
func TestBindingWithoutAClaimClaimsItsIDAtStart(t *testing.T) {
	ctx := context.Background()
	tn, other := newTenant(t, "upgraded"), newTenant(t, "upgraded-other")
	id := uniq("before-claims")
	submit(t, tn, "old", id)
	bound(t, tn, "old")
	key := types.NamespacedName{Namespace: "tether-system", Name: jobidclaim.ClaimName(id)}
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx, key, lease); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := env.RestartControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, key, l); err != nil {
			return err
		}
		if ns := l.Annotations[names.ClaimNamespaceAnnotation]; ns != tn.Namespace {
			return fmt.Errorf("claim held by namespace %q, want %q", ns, tn.Namespace)
		}
		return nil
	})
	gone(t, tn, "old")
	submit(t, other, "old", id)
	if wb := boundOrRefused(t, other.Namespace, "old"); wb != nil {
		t.Fatalf("another namespace got the id %q of an upgraded binding", wb.Spec.JobID)
	}
}
