package binding

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// editTenant is a tenant with its namespace's orchestrator and editor rules
// and, as the built-in "edit" role gives, the minting of its
// ServiceAccounts' tokens (so it can mint a pod token for a pod of its own).
func editTenant(t *testing.T, ns string) (*testenv.Tenant, kubernetes.Interface) {
	t.Helper()
	tenancyRun++
	rules := append(append(append([]rbacv1.PolicyRule{}, testenv.OrchestratorRules...), testenv.TenantRules...),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}})
	tn, err := env.NewTenant(context.Background(), uniq(ns), rules)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(tn.Config)
	if err != nil {
		t.Fatal(err)
	}
	return tn, cs
}

// registerAsPod POSTs a registration with the job's token as pod p, with
// p's pod token, and returns the status and the refusal.
func (j *tenantJob) registerAsPod(t *testing.T, p *corev1.Pod, podToken, workerID string) (int, binding.ErrorResponse) {
	t.Helper()
	body, _ := json.Marshal(binding.RegisterRequest{JobID: j.jobID, WorkerID: workerID,
		Pod: binding.PodIdentity{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}})
	req, err := http.NewRequest(http.MethodPost, env.BindingURL+binding.PathRegister, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(binding.HeaderAuthorization, binding.Token(j.token).BearerHeader())
	req.Header.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	req.Header.Set(names.HeaderPodToken, podToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := j.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e binding.ErrorResponse
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, e
}

// A tenant who may create pods (and, with "edit", mint their tokens) makes a
// pod of its own look like node 0 of its bound job: the job's labels and a
// copy of the injection status Tether wrote on the real pod, created
// outside the pod webhook (no tether.dev/bind). Registering with the job's
// token as that pod is refused: only a pod the Job controller created with
// tether.dev/bind, which Tether's webhook injected, is one of the job's
// nodes. The label cannot be put on such a pod afterwards, and a tenant's
// own pod created with it is refused by the API server.
func TestHandMadePodCannotRegisterAsANode(t *testing.T) {
	ctx := context.Background()
	tn, cs := editTenant(t, "handmade")
	submit(t, tn, "model", "")
	realJob := bound(t, tn, "model")
	realPod := &corev1.Pod{}
	if err := tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: realJob.podName}, realPod); err != nil {
		t.Fatal(err)
	}
	workerID := realPod.Annotations[names.PodStatusAnnotation]
	var status struct {
		WorkerID string `json:"workerID"`
	}
	if err := json.Unmarshal([]byte(workerID), &status); err != nil || status.WorkerID == "" {
		t.Fatalf("the real pod's injection status %q: %v", workerID, err)
	}

	// The hand-made pod: node 0's labels, the real pod's status annotation,
	// no tether.dev/bind (so no webhook sees it).
	w := testobj.MakeTrainerPod("model", tn.Namespace).Name("model-node-0-0-handmade").
		Annotation(names.PodStatusAnnotation, realPod.Annotations[names.PodStatusAnnotation])
	handmade := w.Obj()
	if err := tn.Client.Create(ctx, handmade); err != nil {
		t.Fatalf("tenant creating its own pod: %v", err)
	}
	podToken, err := testenv.PodToken(ctx, cs, handmade)
	if err != nil {
		t.Fatalf("tenant minting a pod token for its own pod: %v", err)
	}
	code, refusal := realJob.registerAsPod(t, handmade, podToken, status.WorkerID)
	if code == http.StatusOK {
		t.Fatalf("the tenant's hand-made pod %s registered as node 0 of the job (200)", handmade.Name)
	}
	t.Logf("the tenant sees: %d %s: %s", code, refusal.Code, refusal.Message)
	if code != http.StatusForbidden || !strings.Contains(refusal.Message, "not an injected trainer pod") {
		t.Errorf("registration as the hand-made pod: %d %+v, want 403 saying it is not an injected trainer pod", code, refusal)
	}

	// The label cannot be added afterwards ...
	patched := handmade.DeepCopy()
	patched.Labels[names.BindLabel] = names.BindValue
	err = tn.Client.Update(ctx, patched)
	if err == nil {
		t.Fatalf("tenant added %s=%s to its own pod", names.BindLabel, names.BindValue)
	}
	t.Logf("adding the label: %v", err)
	if !strings.Contains(err.Error(), "never change afterwards") {
		t.Errorf("adding the label refused with %q: want it to say the label is set at creation only", err)
	}
	// ... and a tenant's pod created with it is refused, whatever Tether's
	// webhook made of it.
	routed := testobj.MakeTrainerPod("model", tn.Namespace).Routed().Name("model-node-0-0-routed").Obj()
	err = tn.Client.Create(ctx, routed)
	if err == nil {
		t.Fatalf("tenant created a pod labeled %s=%s", names.BindLabel, names.BindValue)
	}
	t.Logf("creating a labeled pod: %v", err)
	if !strings.Contains(err.Error(), "only the Job controller creates") {
		t.Errorf("a tenant's labeled pod refused with %q: want it to say only the Job controller creates such pods", err)
	}

	// The real pod, which the Job controller created, registers.
	realToken, err := testenv.PodToken(ctx, clientset(t), realPod)
	if err != nil {
		t.Fatal(err)
	}
	if code, refusal := realJob.registerAsPod(t, realPod, realToken, status.WorkerID); code != http.StatusOK {
		t.Errorf("the real pod's registration: %d %+v", code, refusal)
	}
}
