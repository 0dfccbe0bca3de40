package binding

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/controller/trainerstatus"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
)

// readerConfig creates ServiceAccount name in ns, allowed to get, list and
// watch WorkerBindings when allowed, and returns a config with its token.
func readerConfig(t *testing.T, ns, name string, allowed bool) *rest.Config {
	t.Helper()
	mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	if allowed {
		mustCreate(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"tether.dev"}, Resources: []string{"workerbindings"}, Verbs: []string{"get", "list", "watch"}}}})
		mustCreate(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}})
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
}

// An orchestrator reads a job's verified artifacts through the read
// endpoint with its own ServiceAccount token (TokenReview and
// SubjectAccessReview by the control plane, which runs under the RBAC
// manifests/ ships); a changed object is refused, and a caller without get
// on the WorkerBinding, a foreign token, or a bad path is refused.
func TestOrchestratorReadsVerifiedArtifactsWithItsOwnToken(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	files := map[string][]byte{"model.safetensors": bytes.Repeat([]byte("weights"), 100_000), "ckpt/step 10.pt": []byte("ckpt-10")}
	for rel, data := range files {
		j.write(t, rel, data)
	}
	if rep, err := j.syncer(t).Flush(ctx); err != nil {
		t.Fatalf("flush: %v (%+v)", err, rep)
	}
	wb := j.waitArtifacts(t)
	ca, err := os.ReadFile(j.caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(readerConfig(t, j.ns, "reader", true), client.Options{ReadURL: env.BindingURL, ReadCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Artifacts(ctx, wb)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(files) {
		t.Fatalf("Artifacts = %+v, want the %d files", list, len(files))
	}
	for _, a := range list {
		sum := md5.Sum(files[a.Path])
		if !a.Verified || a.Rank != 0 || a.Size != int64(len(files[a.Path])) || a.MD5 != hex.EncodeToString(sum[:]) {
			t.Errorf("artifact %+v, want verified, rank 0, %d bytes, MD5 %x", a, len(files[a.Path]), sum)
		}
	}
	var got bytes.Buffer
	if _, err := c.Download(ctx, wb, "ckpt/step 10.pt", &got); err != nil || got.String() != "ckpt-10" {
		t.Fatalf("Download = %q, %v", got.String(), err)
	}

	// An archived trainer log, read through the same endpoint. The
	// controller archives logs only from a kubelet (none here), so the log
	// is stored as the archiver stores it and listed on this copy of the status.
	logKey := upload.LogKey(wb.Spec.JobID, j.pod.Name)
	if _, err := (fsstore.FSBackend{Root: env.ArtifactDir}).Put(ctx, logKey, strings.NewReader("step 1 loss 2.0\n"), 16); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Log(ctx, wb, j.pod.Name); err == nil {
		t.Error("Log of a pod the status does not list succeeded")
	}
	withLog := wb.DeepCopy()
	withLog.Status.Artifacts.Logs = []string{logKey}
	r, err := c.Log(ctx, withLog, j.pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r); string(b) != "step 1 loss 2.0\n" {
		t.Errorf("log %q", b)
	}
	_ = r.Close()

	// Changed behind the store's back (same size): refused, no file left.
	obj := filepath.Join(env.ArtifactDir, wb.Spec.JobID, "model.safetensors")
	if err := os.WriteFile(obj, bytes.Repeat([]byte("WEIGHTS"), 100_000), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "model")
	_, err = c.DownloadFile(ctx, wb, "model.safetensors", dest)
	var de *client.DigestError
	if !errors.As(err, &de) || de.GotMD5 == de.WantMD5 {
		t.Errorf("DownloadFile of a changed object: %v, want a *DigestError", err)
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused download left %s (%v)", dest, err)
	}

	// Refusals, each with its reason.
	stranger, err := client.New(readerConfig(t, j.ns, "stranger", false), client.Options{ReadURL: env.BindingURL, ReadCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := client.New(&rest.Config{Host: env.Config.Host, BearerToken: "not-a-token", TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}},
		client.Options{ReadURL: env.BindingURL, ReadCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	for who, cl := range map[string]*client.Client{"no RBAC": stranger, "foreign token": forged} {
		_, err := cl.Artifacts(ctx, wb)
		var re *client.ReadError
		want := map[string]int{"no RBAC": http.StatusForbidden, "foreign token": http.StatusUnauthorized}[who]
		if !errors.As(err, &re) || re.Status != want {
			t.Errorf("%s: %v, want %d", who, err, want)
		}
	}
	for path, want := range map[string]int{
		"/orchestrator/v1/namespaces/" + j.ns + "/workerbindings/" + j.name + "/objects/.tether/pending/model.safetensors": http.StatusBadRequest,
		"/orchestrator/v1/namespaces/" + j.ns + "/workerbindings/" + j.name + "/objects/no-such-file":                      http.StatusNotFound,
		"/orchestrator/v1/namespaces/Not_A_Namespace/workerbindings/x/objects/a":                                           http.StatusBadRequest,
		"/orchestrator/v1/namespaces/" + j.ns + "/workerbindings/" + j.name:                                                http.StatusBadRequest,
		"/orchestrator/v1/namespaces/" + j.ns + "/workerbindings/nope/objects/a":                                           http.StatusNotFound,
	} {
		if code, body := rawRead(t, ca, readerConfig(t, j.ns, fmt.Sprintf("raw-%d", len(path)), true).BearerToken, path); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}
}

// rawRead GETs path on the read endpoint with token.
func rawRead(t *testing.T, ca []byte, token, path string) (int, string) {
	t.Helper()
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, env.BindingURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

func getTrainJob(t *testing.T, j *job) *unstructured.Unstructured {
	t.Helper()
	tj := &unstructured.Unstructured{}
	tj.SetGroupVersionKind(trainjob.GVK)
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, tj); err != nil {
		t.Fatal(err)
	}
	return tj
}

func progressLine(t *testing.T, j *job, step int, fraction float64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(j.artifactDir, binding.ProgressFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, `{"step": %d, "epoch": 0.5, "loss": 1.25, "fraction": %g}`+"\n", step, fraction)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// The worker's progress reaches TrainJob.status.trainerStatus (Trainer
// v2.3.0's CRD), written by Tether's field manager with an ETA from the
// step rate; a job with tether.dev/trainer-status=off is left alone; a
// trainer's native report is shown on the binding and never overwritten.
func TestTrainerStatusFromWorkerProgressAndNative(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	off := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s", names.TrainerStatusAnnotation: jobconfig.TrainerStatusOff})
	for _, x := range []*job{j, off} {
		progressLine(t, x, 10, 0.1)
		runningClient(t, x.clientConfig())
		x.waitPhase(t, tetherv1.PhaseRunning, "")
	}
	eventually(t, 20*time.Second, func() error {
		if p := j.binding(t).Status.Progress; p == nil || p.Step == nil || *p.Step != 10 {
			return fmt.Errorf("binding progress %+v, want step 10", p)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // a step rate needs time between samples
	progressLine(t, j, 40, 0.4)
	var ts map[string]any
	eventually(t, 30*time.Second, func() error {
		tj := getTrainJob(t, j)
		ts, _, _ = unstructured.NestedMap(tj.Object, "status", "trainerStatus")
		if fmt.Sprint(ts["progressPercentage"]) != "40" || ts["estimatedRemainingSeconds"] == nil {
			return fmt.Errorf("trainerStatus %v, want progressPercentage 40 and an ETA", ts)
		}
		for _, mf := range tj.GetManagedFields() {
			if mf.Manager == trainerstatus.FieldManager && mf.Subresource == "status" && mf.Operation == metav1.ManagedFieldsOperationApply {
				return nil
			}
		}
		return fmt.Errorf("no server-side apply by %s on status", trainerstatus.FieldManager)
	})
	// 30 steps in at least 3 s: at most 10 steps/s, so 60 steps to go take at least 6 s.
	if eta, _ := ts["estimatedRemainingSeconds"].(int64); eta < 6 || fmt.Sprint(ts["metrics"]) != "[map[name:step value:40] map[name:epoch value:0.5] map[name:loss value:1.25]]" {
		t.Errorf("trainerStatus %v: want ETA >= 6 s and metrics step, epoch, loss", ts)
	}
	consistently(t, 3*time.Second, func() error {
		if _, found, _ := unstructured.NestedMap(getTrainJob(t, off).Object, "status", "trainerStatus"); found {
			return errors.New("trainerStatus written on a job with tether.dev/trainer-status=off")
		}
		return nil
	})

	// A trainer reporting natively (as through Trainer's status server).
	native := newJob(t, nil)
	apply := &unstructured.Unstructured{Object: map[string]any{"apiVersion": trainjob.GVK.GroupVersion().String(), "kind": trainjob.GVK.Kind,
		"metadata": map[string]any{"name": native.name, "namespace": native.ns},
		"status": map[string]any{"trainerStatus": map[string]any{"progressPercentage": int64(42), "lastUpdatedTime": time.Now().UTC().Format(time.RFC3339),
			"metrics": []any{map[string]any{"name": "step", "value": "420"}, map[string]any{"name": "loss", "value": "0.5"}}}}}}
	if err := env.Client.Status().Apply(ctx, crclient.ApplyConfigurationFromUnstructured(apply), crclient.FieldOwner("trainer-status-server")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		p := native.binding(t).Status.Progress
		if p == nil || p.Fraction != "0.42" || p.Step == nil || *p.Step != 420 || p.Loss != "0.5" {
			return fmt.Errorf("binding progress %+v, want the native 42%%, step 420, loss 0.5", p)
		}
		return nil
	})
	consistently(t, 3*time.Second, func() error {
		for _, mf := range getTrainJob(t, native).GetManagedFields() {
			if mf.Manager == trainerstatus.FieldManager {
				return errors.New("Tether wrote trainerStatus over the trainer's native report")
			}
		}
		return nil
	})
}
