package binding

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	tetherclient "github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/sidecar/session"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// Attack tests of "verified means exactly the manifest": a tenant holding
// only its namespace's RBAC (and, for a rank's report, the built-in edit
// role, which lets it mint its own pods' tokens) tries to have Tether keep
// and serve, as a verified artifact, something no verified manifest lists.

func md5Of(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// manifestOf is node rank's manifest for job jobID, written by pod podUID,
// listing files.
func manifestOf(jobID, podUID string, files map[string][]byte) []byte {
	m := upload.Manifest{Version: upload.ManifestVersion, JobID: jobID, PodUID: podUID, Files: []upload.ManifestFile{}}
	for p, b := range files {
		m.Files = append(m.Files, upload.ManifestFile{Path: p, Size: int64(len(b)), MD5: md5Of(b)})
	}
	out, _ := json.Marshal(m)
	return out
}

// readBody GETs path of the tenant's binding through the orchestrator
// read endpoint as the tenant's user, and returns the status and the body.
func (j *tenantJob) readBody(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, env.BindingURL+tetherv1.ReadPathPrefix+j.tenant.Namespace+"/workerbindings/"+j.name+"/objects/"+path, nil)
	req.Header.Set("Authorization", "Bearer "+j.tenant.Token)
	req.Header.Set("X-Tether-Stream", "true")
	resp, err := j.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// authorize asks the direct-upload authorize endpoint for key, as the
// job's sidecar would before a direct upload.
func (j *tenantJob) authorize(t *testing.T, key string, size int64) (int, string) {
	t.Helper()
	b, _ := json.Marshal(upload.AuthorizeRequest{Key: key, Size: size})
	req, _ := http.NewRequest(http.MethodPost, env.BindingURL+upload.PathAuthorize, bytes.NewReader(b))
	req.Header.Set(names.HeaderArtifactToken, j.token)
	req.Header.Set(names.HeaderArtifactPodUID, j.podUID)
	req.Header.Set(names.HeaderPodToken, j.podToken)
	resp, err := j.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(msg)
}

// completeTenantJob ends the tenant's TrainJob name as the kubelet and
// Trainer would: every trainer exits 0, the TrainJob is Complete.
func completeTenantJob(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	var pods corev1.PodList
	if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		finishTrainer(t, &job{ns: ns, name: name, pod: &pods.Items[i]}, 0)
	}
	setTrainJobCondition(t, &job{ns: ns, name: name}, "Complete", "jobset completed")
}

// finalPhase waits for binding ns/name to be Succeeded or Failed.
func finalPhase(t *testing.T, ns, name string) *tetherv1.WorkerBinding {
	t.Helper()
	var wb *tetherv1.WorkerBinding
	eventually(t, 30*time.Second, func() error {
		wb = &tetherv1.WorkerBinding{}
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, wb); err != nil {
			return err
		}
		if !lifecycle.IsFinal(wb.Status.Phase) {
			return fmt.Errorf("phase %s/%s (%s), want final", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
		}
		return nil
	})
	return wb
}

// Once the job's manifest is verified, the tenant (the job's token and its
// pod's proof) writes a key the manifest does not list, and after the job
// is Succeeded reads it back through the read endpoint and the Go client:
// the write is refused, naming the key and why, nothing is stored, and a
// Succeeded job serves only what its verified manifest lists (an unlisted
// object stored before the verdict included) and its manifest.
func TestTenantCannotAddAnUnlistedObjectToVerifiedArtifacts(t *testing.T) {
	start := time.Now()
	defer func() { t.Logf("took %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	tn := newTenant(t, "verified-only")
	submit(t, tn, "job", "")
	j := bound(t, tn, "job")
	model := []byte("the verified model")
	j.store(t, j.jobID+"/model.bin", model)
	// Stored before the verdict, never listed.
	j.store(t, j.jobID+"/scratch.bin", []byte("a scratch file the manifest leaves out"))
	m := manifestOf(j.jobID, j.podUID, map[string][]byte{"model.bin": model})
	if code, msg := j.object(t, j.jobID+"/"+upload.ManifestName, m); code != http.StatusOK {
		t.Fatalf("the manifest: %d %s", code, msg)
	}
	eventually(t, 15*time.Second, func() error {
		wb := &tetherv1.WorkerBinding{}
		if err := tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: "job"}, wb); err != nil {
			return err
		}
		if n := nodeOf(wb, 0); n == nil || n.Artifacts == nil || !n.Artifacts.Verified {
			return fmt.Errorf("node 0's manifest not verified yet: %+v", wb.Status.Nodes)
		}
		return nil
	})

	// After the verdict: a PUT, and a direct upload's authorize, of a key
	// the manifest does not list.
	unlisted := j.jobID + "/unlisted.bin"
	code, msg := j.object(t, unlisted, []byte("planted after the verdict"))
	t.Logf("PUT %s after the verdict: %d %s", unlisted, code, msg)
	if code != http.StatusForbidden || !strings.Contains(msg, "AccessDenied") || !strings.Contains(msg, unlisted) || !strings.Contains(msg, "already verified") {
		t.Errorf("PUT of an unlisted key after the manifest was verified: %d %s, want 403 AccessDenied naming the key and the verified manifest", code, msg)
	}
	if code, msg := j.authorize(t, j.jobID+"/other.bin", 2<<20); code != http.StatusForbidden || !strings.Contains(msg, "already verified") {
		t.Errorf("authorize of an unlisted key after the manifest was verified: %d %s, want 403", code, msg)
	}
	// What the manifest lists is still the node's to write (a new version
	// waits as the key's pending object).
	if code, msg := j.object(t, j.jobID+"/model.bin", []byte("a later version")); code != http.StatusOK {
		t.Errorf("PUT of a listed key after the verdict: %d %s", code, msg)
	}

	completeTenantJob(t, tn.Namespace, "job")
	if wb := finalPhase(t, tn.Namespace, "job"); wb.Status.Phase != tetherv1.PhaseSucceeded {
		t.Fatalf("binding %s/%s (%s), want Succeeded", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
	}
	for path, want := range map[string]int{
		"model.bin": http.StatusOK, upload.ManifestName: http.StatusOK,
		"unlisted.bin": http.StatusNotFound, "scratch.bin": http.StatusNotFound,
	} {
		code, body := j.readBody(t, path)
		t.Logf("GET %s of the Succeeded job: %d %s", path, code, strings.TrimSpace(body))
		if code != want {
			t.Errorf("GET %s of the Succeeded job: %d %s, want %d", path, code, body, want)
		} else if want == http.StatusNotFound && !strings.Contains(body, "not part of the job's verified artifacts") {
			t.Errorf("GET %s of the Succeeded job: %s, want it to say it is not part of the job's verified artifacts", path, body)
		}
	}
	if code, body := j.readBody(t, "model.bin"); code == http.StatusOK && body != string(model) {
		t.Errorf("model.bin of the Succeeded job holds %q, want the verified version", body)
	}

	// The Go client as the tenant (kubectl tether artifacts ls/get): only
	// the listed file, and the unlisted ones are refused, never read.
	c, err := tetherclient.New(tn.Config, tetherclient.Options{ReadURL: env.BindingURL, ReadCA: j.ca})
	if err != nil {
		t.Fatal(err)
	}
	wb, err := c.Get(ctx, tn.Namespace, "job")
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Artifacts(ctx, wb)
	if err != nil || len(list) != 1 || list[0].Path != "model.bin" || !list[0].Verified {
		t.Errorf("Artifacts = %+v, %v; want model.bin alone, verified", list, err)
	}
	var got bytes.Buffer
	if _, err := c.Download(ctx, wb, "model.bin", &got); err != nil || !bytes.Equal(got.Bytes(), model) {
		t.Errorf("Download(model.bin) = %q, %v", got.String(), err)
	}
	for _, p := range []string{"unlisted.bin", "scratch.bin"} {
		if _, err := c.Download(ctx, wb, p, io.Discard); err == nil {
			t.Errorf("Download(%s) of the Succeeded job succeeded: it is no verified artifact", p)
		}
	}
}

// withEdit binds the built-in edit role to the tenant in its namespace:
// what a namespace's users commonly hold, and what lets them mint a token
// for any ServiceAccount of the namespace (create serviceaccounts/token),
// bound to any of its pods. ClusterRole edit is aggregated by the
// kube-controller-manager, which envtest does not run: the binding is to
// system:aggregate-to-edit, the built-in part that holds edit's own rules.
func withEdit(t *testing.T, tn *testenv.Tenant) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit", Namespace: tn.Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:aggregate-to-edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: tn.Name, Namespace: tn.Namespace}}}
	if err := env.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(tn.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's RBAC cache takes the binding within moments.
	eventually(t, 10*time.Second, func() error {
		sar := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: tn.Namespace, Verb: "create", Resource: "serviceaccounts", Subresource: "token"}}}
		got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !got.Status.Allowed {
			return fmt.Errorf("the tenant may not create serviceaccounts/token yet: %s", got.Status.Reason)
		}
		return nil
	})
	return cs
}

// rankReportAttack runs a 2-node job of a tenant holding edit: rank 0
// verifies its files; rank 1's sidecar reports a file its final flush could
// not verify; the tenant mints a pod token for rank 1's pod itself and
// sends an empty manifest for rank 1, before the report (manifestFirst) or
// after it. The job must not succeed.
func rankReportAttack(t *testing.T, ns string, manifestFirst bool) {
	start := time.Now()
	defer func() { t.Logf("took %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	tn := newTenant(t, ns)
	cs := withEdit(t, tn)
	nodes := tenantTwoNodeJob(t, tn, "train")
	var sidecars [2]*session.Client
	for r, j := range nodes {
		sidecars[r], _, _ = runningClient(t, j.clientConfig())
	}
	waitRegistered(t, nodes)
	nodes[0].write(t, "model.bin", bytes.Repeat([]byte("rank 0 shard "), 1000))
	if rep, err := nodes[0].nodeSyncer(t, 0).Flush(ctx); err != nil {
		t.Fatalf("rank 0 flush: %v (%+v)", err, rep)
	}

	// The tenant's own pod token for rank 1's pod (edit grants
	// serviceaccounts/token), and the job's token from its Secret.
	podToken, err := testenv.PodToken(ctx, cs, nodes[1].pod)
	if err != nil {
		t.Fatalf("the tenant minting a pod token for rank 1's pod: %v", err)
	}
	attacker := nodes[1].tokenClient(t)
	attacker.podToken = podToken
	rank1 := string(nodes[1].pod.UID)
	empty := manifestOf(nodes[0].clientConfig().JobID, rank1, nil)
	sendEmpty := func() {
		t.Helper()
		code, msg := attacker.putAs(rank1, "nodes/1/"+upload.ManifestName, empty)
		t.Logf("the tenant's empty manifest for rank 1: %d %s", code, msg)
	}
	report := func() {
		t.Helper()
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := sidecars[1].Finish(fctx, "SIGTERM"); err != nil {
			t.Fatal(err)
		}
		if err := sidecars[1].FinishWith(fctx, binding.Finishing{Reason: "SIGTERM", Unverified: []string{"shard-1.pt"}, UnverifiedCount: 1,
			ArtifactError: `"shard-1.pt": not verified: open: permission denied`}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 15*time.Second, func() error {
			if n := nodeOf(nodes[0].binding(t), 1); n == nil || !n.Terminating {
				return fmt.Errorf("rank 1's finishing report not recorded yet")
			}
			return nil
		})
	}
	if manifestFirst {
		sendEmpty()
		report()
	} else {
		report()
		sendEmpty()
	}
	// What the tenant reads on its binding before the job completes: rank
	// 1's report, not the manifest's verdict. Then the job completes, and
	// its end is checked either way.
	deadline := time.Now().Add(10 * time.Second)
	for {
		wb := &tetherv1.WorkerBinding{}
		if err := tn.Client.Get(ctx, types.NamespacedName{Namespace: tn.Namespace, Name: "train"}, wb); err != nil {
			t.Fatal(err)
		}
		n := nodeOf(wb, 1)
		if n != nil && n.Artifacts != nil && !n.Artifacts.Verified && slices.Contains(n.Artifacts.Missing, "nodes/1/shard-1.pt") {
			break
		}
		if time.Now().After(deadline) {
			var a tetherv1.NodeArtifacts
			if n != nil && n.Artifacts != nil {
				a = *n.Artifacts
			}
			t.Errorf("node 1's artifacts %+v, want unverified, naming nodes/1/shard-1.pt (its sidecar's report)", a)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, j := range nodes {
		finishTrainer(t, j, 0)
	}
	setTrainJobCondition(t, nodes[0], "Complete", "jobset completed")
	wb := finalPhase(t, tn.Namespace, "train")
	t.Logf("the tenant sees: %s/%s: %s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
	if wb.Status.Phase != tetherv1.PhaseFailed || wb.Status.Reason != tetherv1.ReasonArtifactsIncomplete {
		t.Fatalf("binding %s/%s (%s), want Failed/ArtifactsIncomplete: rank 1's sidecar reported shard-1.pt unverified", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
	}
	if !strings.Contains(wb.Status.Message, "node 1") || !strings.Contains(wb.Status.Message, "nodes/1/shard-1.pt") {
		t.Errorf("message %q does not name node 1's unverified file", wb.Status.Message)
	}
}

// A tenant holding edit sends an empty manifest for rank 1 after rank 1's
// sidecar reported a file its final flush could not verify: the report
// stands, and the job fails ArtifactsIncomplete naming the file.
func TestTenantEmptyManifestAfterARanksReportDoesNotSucceed(t *testing.T) {
	rankReportAttack(t, "rank-report-after", false)
}

// The same empty manifest sent first (while rank 1 still runs): rank 1's
// report takes the verdict back.
func TestTenantEmptyManifestBeforeARanksReportDoesNotSucceed(t *testing.T) {
	rankReportAttack(t, "rank-report-before", true)
}
