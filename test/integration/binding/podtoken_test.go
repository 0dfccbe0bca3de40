package binding

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// tenantTwoNodeJob is a 2-node TrainJob the tenant submits, with the two
// trainer pods its JobSet's Jobs would make (created as the Job
// controller), and the files the kubelet would give each pod's sidecar.
func tenantTwoNodeJob(t *testing.T, tn *testenv.Tenant, name string) [2]*job {
	t.Helper()
	ctx := context.Background()
	tw := testobj.MakeTrainJob(name, tn.Namespace).Bound().NumNodes(2).Annotation(names.HeartbeatIntervalAnnotation, "1s")
	if err := tn.Client.Create(ctx, tw.Obj()); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	eventually(t, 20*time.Second, func() error {
		return tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: binding.TokenSecretName(name)}, secret)
	})
	var out [2]*job
	for rank := range 2 {
		j := &job{ns: tn.Namespace, name: name}
		j.pod = testobj.MakeTrainerPod(name, tn.Namespace).Routed().CompletionIndex(strconv.Itoa(rank)).Name(fmt.Sprintf("%s-node-0-%d", name, rank)).Obj()
		if err := jobController(t).Create(ctx, j.pod); err != nil {
			t.Fatalf("creating rank %d's pod as the Job controller: %v", rank, err)
		}
		j.writeFiles(t, secret)
		out[rank] = j
	}
	// No JobSet API here: record the count the controller reads from the
	// TrainJob's JobSet.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wb := out[0].binding(t)
		wb.Status.NodeCount = 2
		return env.Client.Status().Update(ctx, wb)
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// registerAs POSTs a registration with j's job token, claiming pod, with
// podToken in names.HeaderPodToken (none when empty).
func registerAs(t *testing.T, j *job, podToken string, pod binding.PodIdentity) (int, binding.ErrorResponse) {
	t.Helper()
	c := j.tokenClient(t)
	cfg := j.clientConfig()
	body, _ := json.Marshal(binding.RegisterRequest{JobID: cfg.JobID, WorkerID: cfg.WorkerID, Pod: pod})
	req, err := http.NewRequest(http.MethodPost, cfg.ServerURL+binding.PathRegister, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(binding.HeaderAuthorization, binding.Token(c.token).BearerHeader())
	req.Header.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	req.Header.Set("Content-Type", "application/json")
	if podToken != "" {
		req.Header.Set(names.HeaderPodToken, podToken)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e binding.ErrorResponse
	_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
	return resp.StatusCode, e
}

// The pod a request speaks for is the one its pod token proves, not the one
// it names. A tenant holding only its namespace's RBAC runs a 2-node job;
// rank 0's sidecar (the job's token, rank 0's pod token) learns rank 1's pod
// UID from the pod list and sends it: registering as rank 1, writing rank
// 1's keys and an empty manifest for it are refused. So are a token of
// another audience, a pod token of another namespace's pod, and no token.
func TestPodTokenProvesThePod(t *testing.T) {
	ctx := context.Background()
	tn := newTenant(t, "podproof")
	other := newTenant(t, "podproof-other")
	nodes := tenantTwoNodeJob(t, tn, "train")
	for _, j := range nodes {
		runningClient(t, j.clientConfig())
	}
	waitRegistered(t, nodes)

	// What the attacker knows: rank 1's pod, read with the tenant's RBAC.
	var pods corev1.PodList
	if err := tn.Client.List(ctx, &pods, client.InNamespace(tn.Namespace)); err != nil {
		t.Fatal(err)
	}
	var rank1 binding.PodIdentity
	for _, p := range pods.Items {
		if p.Name == nodes[1].pod.Name {
			rank1 = binding.PodIdentity{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
		}
	}
	if rank1.UID == "" {
		t.Fatal("the tenant cannot see rank 1's pod")
	}
	token0 := nodes[0].podToken(t)

	// Registering as rank 1 with rank 0's pod token.
	if code, e := registerAs(t, nodes[0], token0, rank1); code != http.StatusForbidden || !strings.Contains(e.Message, "pod token") {
		t.Errorf("rank 0's sidecar registering as rank 1: %d %s %q, want 403 naming the pod token", code, e.Code, e.Message)
	}
	// Writing rank 1's keys and its manifest, naming rank 1's pod.
	c := nodes[0].tokenClient(t) // rank 0's pod token
	jobID := nodes[0].clientConfig().JobID
	if code, msg := c.putAs(rank1.UID, "nodes/1/shard.bin", []byte("planted")); code != http.StatusForbidden || !strings.Contains(msg, "pod token") {
		t.Errorf("rank 0's pod token writing rank 1's key as rank 1: %d %s, want 403 naming the pod token", code, msg)
	}
	m, _ := json.Marshal(upload.Manifest{Version: upload.ManifestVersion, JobID: jobID, PodUID: rank1.UID, Files: []upload.ManifestFile{}})
	if code, msg := c.putAs(rank1.UID, "nodes/1/"+upload.ManifestName, m); code != http.StatusForbidden || !strings.Contains(msg, "pod token") {
		t.Errorf("rank 0's pod token sending an empty manifest as rank 1: %d %s, want 403 naming the pod token", code, msg)
	}
	if n := nodeOf(nodes[0].binding(t), 1); n != nil && n.Artifacts != nil {
		t.Errorf("rank 1 has a manifest verdict it never sent: %+v", n.Artifacts)
	}

	// A token of another audience: rank 1's own pod, but the API server's
	// audience (a kube-api-access token), and the tenant's own token.
	cs := clientset(t)
	apiToken, err := cs.CoreV1().ServiceAccounts(tn.Namespace).CreateToken(ctx, "default", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: rank1.Name, UID: types.UID(rank1.UID)},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"rank 1's kube-api-access token": apiToken.Status.Token, "the tenant's own token": tn.Token} {
		if code, e := registerAs(t, nodes[1], tok, rank1); code != http.StatusUnauthorized || !strings.Contains(e.Message, names.PodTokenAudience) {
			t.Errorf("%s as the pod token: %d %s %q, want 401 naming audience %s", name, code, e.Code, e.Message, names.PodTokenAudience)
		}
	}
	// A pod token of a pod in another namespace (another tenant's pod of
	// the same name), claiming rank 1.
	foreign := testobj.MakeTrainerPod("train", other.Namespace).Name(rank1.Name).Obj()
	if err := other.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	foreignToken, err := testenv.PodToken(ctx, cs, foreign)
	if err != nil {
		t.Fatal(err)
	}
	if code, e := registerAs(t, nodes[1], foreignToken, rank1); code != http.StatusForbidden || !strings.Contains(e.Message, "not a pod in the binding's namespace") {
		t.Errorf("another namespace's pod token: %d %s %q, want 403 naming the namespace", code, e.Code, e.Message)
	}
	// No pod token at all.
	if code, e := registerAs(t, nodes[1], "", rank1); code != http.StatusUnauthorized || !strings.Contains(e.Message, names.HeaderPodToken) {
		t.Errorf("no pod token: %d %s %q, want 401 naming %s", code, e.Code, e.Message, names.HeaderPodToken)
	}
	c1 := nodes[1].tokenClient(t)
	c1.podToken = ""
	if code, msg := c1.putAs(rank1.UID, "nodes/1/shard.bin", []byte("x")); code != http.StatusUnauthorized || !strings.Contains(msg, names.HeaderPodToken) {
		t.Errorf("artifact PUT without a pod token: %d %s, want 401 naming %s", code, msg, names.HeaderPodToken)
	}

	// Rank 1 itself, with its own pod token, still registers and writes.
	if code, e := registerAs(t, nodes[1], nodes[1].podToken(t), rank1); code != http.StatusOK {
		t.Errorf("rank 1 registering with its own pod token: %d %s %q", code, e.Code, e.Message)
	}
	if code, msg := nodes[1].tokenClient(t).putAs(rank1.UID, "nodes/1/shard.bin", []byte("rank 1's shard")); code != http.StatusOK {
		t.Errorf("rank 1 writing its own key: %d %s", code, msg)
	}
	if got := counter(t, `tether_binding_refusals_total{reason="pod_token_mismatch"}`); got < 1 {
		t.Errorf("pod_token_mismatch refusals: %v, want counted", got)
	}
}
