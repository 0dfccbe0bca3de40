package binding

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/certs"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// More attack tests of tenants holding only their namespace's RBAC (the
// orchestrator Role and a namespace editor's), against the control plane
// as its own ServiceAccount under what manifests/ ships.

// A pod token is good for as long as its pod lives. A tenant's sidecar
// uploads with its pod's token (the binding server reviews it once and
// keeps the verdict); the tenant then deletes the pod and keeps the token:
// its uploads are refused, and stay refused when a pod of the same name is
// created again (another UID), whose own token is accepted.
func TestDeletedPodsTokenDiesWithItsPod(t *testing.T) {
	ctx := context.Background()
	tn := newTenant(t, "podgone")
	submit(t, tn, "job", "")
	j := bound(t, tn, "job")
	j.store(t, j.jobID+"/before.bin", []byte("written while the pod runs"))

	var pods corev1.PodList
	if err := tn.Client.List(ctx, &pods, client.InNamespace(tn.Namespace)); err != nil || len(pods.Items) != 1 {
		t.Fatalf("the tenant's pods: %v (%d)", err, len(pods.Items))
	}
	pod := pods.Items[0]
	if err := tn.Client.Delete(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := tn.Client.Get(ctx, client.ObjectKeyFromObject(&pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there: %v", pod.Name, err)
		}
		return nil
	})
	deleted := time.Now()
	var code int
	var msg string
	eventually(t, 10*time.Second, func() error {
		if code, msg = j.object(t, j.jobID+"/after.bin", []byte("written with a deleted pod's token")); code == http.StatusOK {
			return fmt.Errorf("PUT with deleted pod %s's token: %d, want refused", pod.Name, code)
		}
		return nil
	})
	t.Logf("PUT with the deleted pod's token refused %s after the delete: %d %s", time.Since(deleted).Round(time.Millisecond), code, strings.TrimSpace(msg))
	if code != http.StatusUnauthorized || !strings.Contains(msg, "no longer exists") {
		t.Errorf("PUT with the deleted pod's token: %d %s, want 401 saying the pod no longer exists", code, msg)
	}
	wb := &tetherv1.WorkerBinding{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: "job"}, wb); err != nil {
		t.Fatal(err)
	}
	if wb.Status.Artifacts != nil && wb.Status.Artifacts.Files > 1 {
		t.Errorf("the binding counts %d files", wb.Status.Artifacts.Files)
	}

	// A pod of the same name again (as the Job controller): the old token
	// stays dead, the new pod's works.
	again := testobj.MakeTrainerPod("job", tn.Namespace).Routed().Name(pod.Name).Obj()
	if err := jobController(t).Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	if again.UID == pod.UID {
		t.Fatal("the recreated pod has the deleted pod's UID")
	}
	consistently(t, 2*time.Second, func() error {
		if code, msg := j.object(t, j.jobID+"/after.bin", []byte("old token, recreated name")); code == http.StatusOK {
			return fmt.Errorf("PUT with the deleted pod's token, a pod of its name recreated: %d %s", code, msg)
		}
		return nil
	})
	newToken, err := testenv.PodToken(ctx, clientset(t), again)
	if err != nil {
		t.Fatal(err)
	}
	fresh := *j
	fresh.podUID, fresh.podToken = string(again.UID), newToken
	fresh.store(t, j.jobID+"/after.bin", []byte("written by the new pod"))
	if got := counter(t, `tether_binding_refusals_total{reason="artifact_pod_gone"}`); got < 1 {
		t.Errorf("refusals of a gone pod's token: %v, want counted as artifact_pod_gone", got)
	}
}

// tenantRunningJob is a bound TrainJob the tenant submitted, its node-0 pod
// (created as the Job controller), and that pod's sidecar session, Running.
func tenantRunningJob(t *testing.T, tn *testenv.Tenant, name string) (*job, *tenantJob) {
	t.Helper()
	ctx := context.Background()
	tw := testobj.MakeTrainJob(name, tn.Namespace).Bound().Annotation(names.HeartbeatIntervalAnnotation, "1s")
	if err := tn.Client.Create(ctx, tw.Obj()); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	eventually(t, 20*time.Second, func() error {
		return tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: binding.TokenSecretName(name)}, secret)
	})
	j := &job{ns: tn.Namespace, name: name}
	j.pod = testobj.MakeTrainerPod(name, tn.Namespace).Routed().Obj()
	if err := jobController(t).Create(ctx, j.pod); err != nil {
		t.Fatal(err)
	}
	j.writeFiles(t, secret)
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	tj := &tenantJob{tenant: tn, name: name, jobID: j.clientConfig().JobID, token: string(secret.Data[names.TokenKey]),
		ca: secret.Data[names.CABundleKey], podUID: string(j.pod.UID), podToken: j.podToken(t)}
	return j, tj
}

// An orchestrator (patch on WorkerBindings, to send commands) tries to end
// a running job through its binding's metadata: removing the binding's
// ownerReferences (which once made the controller take the TrainJob for
// deleted), Tether's label, or adding a finalizer of Tether's. The API
// server refuses each, and the job runs on: the binding stays Running,
// owned by its TrainJob, and its token keeps working. A command and a
// label of the tenant's own are still accepted.
func TestOrchestratorCannotEndARunningJobThroughItsBindingsMetadata(t *testing.T) {
	ctx := context.Background()
	tn := newTenant(t, "meta-patch")
	j, tj := tenantRunningJob(t, tn, "train")
	tj.store(t, tj.jobID+"/before.bin", []byte("before"))

	own := &tetherv1.WorkerBinding{}
	own.Namespace, own.Name = tn.Namespace, "train"
	for _, c := range []struct {
		name  string
		patch client.Patch
		want  string
	}{
		{"ownerReferences removed (merge)", client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`)), "ownerReferences"},
		{"ownerReferences removed (JSON patch)", client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`)), "ownerReferences"},
		{"owner's UID changed", client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/metadata/ownerReferences/0/uid","value":"00000000-0000-0000-0000-000000000000"}]`)), "ownerReferences"},
		{"Tether's label removed", client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+names.BindLabel+`":null}}}`)), "tether.dev/ domain"},
		{"a finalizer of Tether's added", client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["tether.dev/hold"]}}`)), "tether.dev/ domain"},
	} {
		err := tn.Client.Patch(ctx, own.DeepCopy(), c.patch)
		if err == nil {
			t.Errorf("the tenant's patch of its running binding (%s) was accepted", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, err)
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want refused naming %q", c.name, err, c.want)
		}
	}
	// The job runs on, whatever the API server did with the patches.
	consistently(t, 10*time.Second, func() error {
		wb := j.binding(t)
		if wb.Status.Phase != tetherv1.PhaseRunning || lifecycle.TrainJobOwner(wb) == "" {
			return fmt.Errorf("binding %s/%s (%s), owners %v: want Running, owned by its TrainJob", wb.Status.Phase, wb.Status.Reason, wb.Status.Message, wb.OwnerReferences)
		}
		return nil
	})
	tj.store(t, tj.jobID+"/after.bin", []byte("after"))
	err := tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: binding.TokenSecretName("train")}, &corev1.Secret{})
	if err != nil {
		t.Errorf("the token Secret: %v", err)
	}
	// What the tenant may still do with its binding's metadata.
	for name, patch := range map[string]string{
		"a command":                `{"metadata":{"annotations":{"tether.dev/command":"flush:1"}}}`,
		"a label of its own":       `{"metadata":{"labels":{"team":"vision"}}}`,
		"a finalizer of its own":   `{"metadata":{"finalizers":["example.com/keep"]}}`,
		"its own finalizer, again": `{"metadata":{"finalizers":null}}`,
	} {
		if err := tn.Client.Patch(ctx, own.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Errorf("%s refused: %v", name, err)
		}
	}
}

// An install without the admission policy (here: the owner reference
// removed by a user the policy exempts): the controller puts the reference
// back and never takes the live TrainJob for deleted.
func TestRemovedOwnerReferenceIsRestored(t *testing.T) {
	tn := newTenant(t, "meta-restore")
	j, _ := tenantRunningJob(t, tn, "train")
	removeOwnerRefs(t, j.binding(t))
	eventually(t, 10*time.Second, func() error {
		if wb := j.binding(t); lifecycle.TrainJobOwner(wb) == "" {
			return fmt.Errorf("binding owners %v: not restored", wb.OwnerReferences)
		}
		return nil
	})
	consistently(t, 5*time.Second, func() error {
		if wb := j.binding(t); lifecycle.IsFinal(wb.Status.Phase) {
			return fmt.Errorf("binding %s/%s: %s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
		}
		return nil
	})
}

// forgedReview posts an AdmissionReview of pod to the pod webhook at addr,
// as the tenant could: through the Service's webhook port, which every
// sidecar reaches, trusting the CA of its own token Secret. It returns the
// HTTP status and the review's response (nil when none).
func forgedReview(t *testing.T, addr string, ca []byte, cert *tls.Certificate, pod *corev1.Pod) (int, *admissionv1.AdmissionResponse) {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: types.UID(fmt.Sprintf("forged-%d", time.Now().UnixNano())),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
			UserInfo: authnv1.UserInfo{Username: "system:serviceaccount:kube-system:job-controller"}},
	}
	body, _ := json.Marshal(review)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cfg := &tls.Config{RootCAs: pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	resp, err := hc.Post("https://"+addr+controlplane.PodWebhookPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, out.Response
}

// webhookAddr is the control plane's webhook address in this environment
// (the Service's port 443 in a cluster).
func webhookAddr() string {
	return net.JoinHostPort(env.Webhook.LocalServingHost, strconv.Itoa(env.Webhook.LocalServingPort))
}

// victimEvents sums the Events the control plane recorded on TrainJob
// ns/name from the pod webhook (action Inject), and returns their notes.
func victimEvents(ns, name string) (notes []string, count int32, err error) {
	var list eventsv1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return nil, 0, err
	}
	for _, e := range list.Items {
		if e.Regarding.Name != name || e.ReportingController == "" && e.DeprecatedSource.Component == "" {
			continue
		}
		switch e.Reason {
		case string(mutate.DenyNameConflict), string(mutate.ReasonInjectionWarning):
			notes = append(notes, e.Reason+": "+e.Note)
			count += max(e.DeprecatedCount, 1)
		}
	}
	return notes, count, nil
}

// A tenant posts forged AdmissionReviews to the control plane's webhook
// port naming another tenant's bound TrainJob: pods whose name (and
// dnsPolicy) carry text of its choosing, one denied (a container named
// like Tether's sidecar) and one patched with a warning (hostNetwork). The
// victim's TrainJob gets Tether's fixed wording only, never the attacker's,
// and no more Events than the per-TrainJob budget however many reviews.
func TestForgedAdmissionReviewWritesNoEventOfItsWording(t *testing.T) {
	victimTenant, attackerTenant := newTenant(t, "review-victim"), newTenant(t, "review-attacker")
	submit(t, victimTenant, "model", "")
	victim := bound(t, victimTenant, "model")
	submit(t, attackerTenant, "job", "")
	attacker := bound(t, attackerTenant, "job")

	const planted = "urgent-call-555-0100-your-model-is-deleted"
	denied := testobj.MakeTrainerPod("model", victimTenant.Namespace).Routed().Name(planted).Obj()
	denied.Spec.Containers = append(denied.Spec.Containers, corev1.Container{Name: mutate.SidecarName, Image: "busybox"})
	warned := testobj.MakeTrainerPod("model", victimTenant.Namespace).Routed().Name(planted + "-2").
		HostNetwork(corev1.DNSPolicy("Default, and " + planted)).Obj()

	const sent = 30
	var learned []string
	for k := range sent {
		for _, pod := range []*corev1.Pod{denied, warned} {
			code, resp := forgedReview(t, webhookAddr(), attacker.ca, nil, pod)
			if k == 0 {
				learned = append(learned, fmt.Sprintf("%d (%s)", code, answered(resp, victim.jobID)))
			}
		}
	}
	t.Logf("what the forged reviews answered: %v", learned)

	eventually(t, 15*time.Second, func() error {
		notes, _, err := victimEvents(victimTenant.Namespace, "model")
		if err != nil || len(notes) < 2 {
			return fmt.Errorf("the victim's webhook Events: %q (%v), want a denial and a warning", notes, err)
		}
		return nil
	})
	consistently(t, 3*time.Second, func() error {
		notes, count, err := victimEvents(victimTenant.Namespace, "model")
		if err != nil {
			return err
		}
		for _, n := range notes {
			if strings.Contains(n, planted) {
				return fmt.Errorf("the victim's TrainJob has an Event with the forged review's text: %q", n)
			}
		}
		// One budget per reason.
		if limit := int32(2 * 10); count > limit {
			return fmt.Errorf("%d webhook Events on the victim's TrainJob for %d forged reviews, want at most %d", count, 2*sent, limit)
		}
		return nil
	})
	notes, count, _ := victimEvents(victimTenant.Namespace, "model")
	t.Logf("the victim sees %d Events for %d forged reviews: %q", count, 2*sent, notes)
}

// With --webhook-client-ca, the admission paths answer only a caller
// presenting a client certificate that CA signed (the kube-apiserver, by
// its AdmissionConfiguration): the tenant's forged review learns nothing
// and records nothing.
func TestForgedAdmissionReviewRefusedWithWebhookClientCA(t *testing.T) {
	ctx := context.Background()
	victimTenant, attackerTenant := newTenant(t, "clientca-victim"), newTenant(t, "clientca-attacker")
	submit(t, victimTenant, "model", "")
	victim := bound(t, victimTenant, "model")
	submit(t, attackerTenant, "job", "")
	attacker := bound(t, attackerTenant, "job")

	clientCA := certs.NewCA(t, certs.CommonName("webhook client CA"))
	caFile := filepath.Join(t.TempDir(), "webhook-client-ca.crt")
	if err := os.WriteFile(caFile, clientCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	var port int
	replica, err := env.StartReplica(ctx, func(o *controlplane.Options) {
		o.WebhookClientCA = caFile
		port = o.WebhookPort
	})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()
	addr := net.JoinHostPort(env.Webhook.LocalServingHost, strconv.Itoa(port))

	pod := testobj.MakeTrainerPod("model", victimTenant.Namespace).Routed().Obj()
	code, resp := forgedReview(t, addr, attacker.ca, nil, pod)
	if code != http.StatusForbidden || resp != nil {
		t.Fatalf("forged review without a client certificate: %d (%s), want 403 and no review", code, answered(resp, victim.jobID))
	}
	apiserver := clientCA.Client(t, "kube-apiserver").TLS()
	code, resp = forgedReview(t, addr, attacker.ca, &apiserver, pod)
	if code != http.StatusOK || resp == nil || !resp.Allowed || !bytes.Contains(resp.Patch, []byte(victim.jobID)) {
		t.Fatalf("review with the API server's client certificate: %d (%s), want the injection", code, answered(resp, victim.jobID))
	}
}

// answered says what a review's response gave away.
func answered(resp *admissionv1.AdmissionResponse, jobID string) string {
	if resp == nil {
		return "no review"
	}
	return fmt.Sprintf("allowed=%v, a %d-byte patch naming the victim's job id: %v", resp.Allowed, len(resp.Patch), bytes.Contains(resp.Patch, []byte(jobID)))
}
