package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/examples/training-service/service"
	"github.com/tether-dev/tether/internal/plugin"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/controller/trainerstatus"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Scenario 14: an orchestrator with nothing but a namespaced ServiceAccount
// (get/list/watch/patch on WorkerBindings, create/get on TrainJobs, list on
// Events, list/patch on Kueue Workloads) runs the example training service:
// a job through Kueue admission to Succeeded, its verified artifacts
// downloaded through the read endpoint (presigned S3 URLs), a second job
// flushed and cancelled (client.Cancel: its Workload deactivated, the quota
// freed, no trainer pod left, the binding Failed/Cancelled).
// While the first one trains, Tether writes its progress into
// TrainJob.status.trainerStatus. Then kubectl tether, as the same
// ServiceAccount: get, describe, artifacts ls|get (a tampered object is
// refused), logs, wait, and a command to a finished job; and a
// ServiceAccount without RBAC on WorkerBindings is refused by the read endpoint.
func TestScenario14ExampleServiceAndPlugin(t *testing.T) {
	shared(t)
	timed(t)
	ctx := context.Background()
	ns := suite.newNamespace(t, "orchestrator")
	const job, cancelJob = "example-train", "example-cancel"
	// 21 s of training: trainerStatus needs two progress reads apart for a
	// step rate; with 8 s, under CI's other lanes, the job ended first.
	setPlans(ns, job, localcluster.TrainerPlan{Steps: 30, CheckpointEvery: 6, StepInterval: 700 * time.Millisecond})
	setPlans(ns, cancelJob, localcluster.TrainerPlan{Steps: 400, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond})

	cfg := suite.orchestratorConfig(t, ns, "orchestrator", true)
	readCA := suite.bindingCA(t)
	c, err := client.New(cfg, client.Options{ReadURL: suite.tether.BindingURL(), ReadCA: readCA})
	if err != nil {
		t.Fatal(err)
	}

	// trainerStatus, watched while the service runs.
	progress := make(chan error, 1)
	go func() { progress <- suite.waitTrainerStatus(ns, job, 90*time.Second) }()

	out := &bytes.Buffer{}
	start := time.Now()
	res, err := service.Run(ctx, c, service.Config{Namespace: ns, Queue: "user-queue", Runtime: localcluster.RuntimeName,
		Job: job, CancelJob: cancelJob, OutDir: t.TempDir(), Timeout: 2 * time.Minute,
		Annotations: map[string]string{names.HeartbeatIntervalAnnotation: "1s"}}, out)
	logf("scenario 14: example service output (%.1fs):\n%s", time.Since(start).Seconds(), out.String())
	if err != nil {
		t.Fatalf("example service: %v", err)
	}
	if err := <-progress; err != nil {
		t.Errorf("TrainJob.status.trainerStatus: %v", err)
	}
	if len(res.Downloaded) == 0 {
		t.Fatalf("no artifact downloaded; listed %+v", res.Artifacts)
	}
	for _, a := range res.Artifacts {
		if !a.Verified {
			t.Errorf("artifact %s not verified after Succeeded", a.Path)
		}
	}
	stored := suite.stored(t, res.Cancelled.Spec.JobID)
	if st := res.Cancelled.Status; st.Phase != tetherv1.PhaseFailed || st.Reason != tetherv1.ReasonCancelled || len(stored) == 0 {
		t.Errorf("cancelled job: %s/%s (want Failed/Cancelled), %d objects stored by its flush", st.Phase, st.Reason, len(stored))
	}
	// The cancel stopped the job, with the service's own credentials: its
	// Workload deactivated and no longer admitted (the quota is free), and
	// no trainer pod left (the binding said Cancelled only once none was).
	suite.waitWorkloadReleased(t, ns, cancelJob, 30*time.Second)
	if pods := suite.trainerPods(t, ns, cancelJob); len(pods) != 0 {
		t.Errorf("cancelled job still has %d trainer pod(s), e.g. %s (%s)", len(pods), pods[0].Name, pods[0].Status.Phase)
	}

	// kubectl tether as the orchestrator.
	kubeconfig := writeKubeconfig(t, cfg)
	run := func(args ...string) (string, string, error) {
		var o, e bytes.Buffer
		cmd := plugin.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &o, ErrOut: &e})
		cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "-n", ns, "--tether-url", suite.tether.BindingURL(),
			"--tether-ca", writeFile(t, "ca.crt", readCA)}, args...))
		err := cmd.ExecuteContext(ctx)
		logf("$ kubectl tether %s\n%s%s(err: %v)", strings.Join(args, " "), o.String(), e.String(), err)
		return o.String(), e.String(), err
	}
	mustRun := func(args ...string) string {
		o, _, err := run(args...)
		if err != nil {
			t.Fatalf("kubectl tether %v: %v", args, err)
		}
		return o
	}
	if o := mustRun("get"); !strings.Contains(o, job) || !strings.Contains(o, cancelJob) || !strings.Contains(o, "Succeeded") {
		t.Errorf("get lists neither both jobs nor Succeeded:\n%s", o)
	}
	mustRun("get", "-o", "wide")
	if o := mustRun("describe", job); !strings.Contains(o, "Registered") || !strings.Contains(o, "TrainerSucceeded") || !strings.Contains(o, "node 0 registered") {
		t.Errorf("describe has no timeline of Events and status:\n%s", o)
	}
	mustRun("describe", cancelJob)
	ls := mustRun("artifacts", "ls", job)
	a := res.Artifacts[0]
	if !strings.Contains(ls, a.Path) || !strings.Contains(ls, a.MD5) {
		t.Errorf("artifacts ls has no %s %s:\n%s", a.Path, a.MD5, ls)
	}
	dest := filepath.Join(t.TempDir(), "got")
	mustRun("artifacts", "get", job, a.Path, "-O", dest)
	if b, err := os.ReadFile(dest); err != nil || int64(len(b)) != a.Size {
		t.Errorf("downloaded %s: %d bytes, %v; want %d", a.Path, len(b), err, a.Size)
	}
	// kwok pods have no container logs to archive (the real node has):
	// the plugin says so and fails.
	if _, _, err := run("logs", job); err == nil {
		t.Error("logs of a job without archived logs succeeded")
	}
	mustRun("wait", job, "--for=phase=Succeeded", "--timeout=10s")
	if _, _, err := run("wait", cancelJob, "--for=phase=Succeeded", "--timeout=10s"); err == nil {
		t.Error("wait --for=phase=Succeeded on a cancelled job succeeded")
	}
	if _, _, err := run("flush", job, "--timeout=10s"); err == nil || !strings.Contains(err.Error(), "before command") {
		t.Errorf("flush of a finished job: %v, want a refusal", err)
	}

	// A tampered object (same size, other bytes) is refused, and no file is left.
	wb, err := c.Get(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{'x'}, int(a.Size))
	if _, err := suite.tether.S3.Admin.PutObject(ctx, suite.tether.S3.Bucket, wb.Spec.JobID+"/"+a.Path, bytes.NewReader(garbage), a.Size, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), "tampered")
	if _, _, err := run("artifacts", "get", job, a.Path, "-O", tampered); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Errorf("artifacts get of a tampered object: %v, want a refusal", err)
	}
	if _, err := os.Stat(tampered); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused download left %s behind (%v)", tampered, err)
	}

	// Without RBAC on the WorkerBinding, the read endpoint refuses.
	nobody, err := client.New(suite.orchestratorConfig(t, ns, "nobody", false), client.Options{ReadURL: suite.tether.BindingURL(), ReadCA: readCA})
	if err != nil {
		t.Fatal(err)
	}
	_, err = nobody.Artifacts(ctx, wb)
	var re *client.ReadError
	if !errors.As(err, &re) || re.Status != 403 {
		t.Errorf("read by a ServiceAccount without RBAC: %v, want 403", err)
	}
	logf("scenario 14: %d artifacts downloaded and verified; cancelled job kept %d objects; phases %v", len(res.Downloaded), len(stored), res.Phases)
}

// orchestratorConfig creates ServiceAccount name in ns (with the
// orchestrator's Role when rbac) and returns a rest.Config with its token.
func (e *env) orchestratorConfig(t *testing.T, ns, name string, rbac bool) *rest.Config {
	t.Helper()
	ctx := context.Background()
	e.create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})
	if rbac {
		e.create(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"tether.dev"}, Resources: []string{"workerbindings"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{"trainer.kubeflow.org"}, Resources: []string{"trainjobs"}, Verbs: []string{"get", "create"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"list"}},
			// client.Cancel stops a job Kueue manages: finds its Workload, deactivates it.
			{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads"}, Verbs: []string{"list", "patch"}},
		}})
		e.create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}})
	}
	cs, err := kubernetes.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: e.c.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: e.c.Config.CAData}}
}

// waitWorkloadReleased waits until the Kueue Workload of TrainJob name is
// deactivated (spec.active=false) and no longer admitted.
func (e *env) waitWorkloadReleased(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("the Workload of %s deactivated and not admitted", name), func() error {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(kueueGroup.WithKind("WorkloadList"))
		if err := e.c.Client.List(context.Background(), list, crclient.InNamespace(ns)); err != nil {
			return err
		}
		for i := range list.Items {
			wl := &list.Items[i]
			for _, o := range wl.GetOwnerReferences() {
				if o.Kind != "TrainJob" || o.Name != name {
					continue
				}
				if active, found, _ := unstructured.NestedBool(wl.Object, "spec", "active"); !found || active {
					return fmt.Errorf("Workload %s: spec.active is not false", wl.GetName())
				}
				if conditionStatus(wl, "Admitted") == "True" || conditionStatus(wl, "QuotaReserved") == "True" {
					return fmt.Errorf("Workload %s: still admitted (Admitted %q, QuotaReserved %q)", wl.GetName(),
						conditionStatus(wl, "Admitted"), conditionStatus(wl, "QuotaReserved"))
				}
				logf("scenario 14: Workload %s deactivated; Evicted: %s", wl.GetName(), conditionMessage(wl, "Evicted"))
				return nil
			}
		}
		return fmt.Errorf("no Workload owned by TrainJob %s", name)
	})
}

// bindingCA is the CA of the control plane's serving certificate: the
// local cluster runs it with --cert-mode=external and a certificate of the
// cluster's CA.
func (e *env) bindingCA(t *testing.T) []byte {
	t.Helper()
	return e.c.CA.CertPEM
}

// waitTrainerStatus waits for Tether's trainerStatus on a training job.
func (e *env) waitTrainerStatus(ns, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		tj := &unstructured.Unstructured{}
		tj.SetAPIVersion("trainer.kubeflow.org/v1alpha1")
		tj.SetKind("TrainJob")
		if err := e.c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, tj); err != nil {
			last = err
		} else if ts, ok, _ := unstructured.NestedMap(tj.Object, "status", "trainerStatus"); !ok {
			last = errors.New("no status.trainerStatus")
		} else if _, ok := ts["progressPercentage"]; !ok || ts["metrics"] == nil || ts["estimatedRemainingSeconds"] == nil {
			last = fmt.Errorf("trainerStatus %v lacks progressPercentage, estimatedRemainingSeconds (from the step rate) or metrics", ts)
		} else {
			for _, mf := range tj.GetManagedFields() {
				if mf.Manager == trainerstatus.FieldManager && mf.Subresource == "status" {
					logf("scenario 14: TrainJob %s status.trainerStatus %v", name, ts)
					return nil
				}
			}
			last = fmt.Errorf("trainerStatus %v not managed by %s", ts, trainerstatus.FieldManager)
		}
		time.Sleep(300 * time.Millisecond)
	}
	return last
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["orchestrator"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "orchestrator"}
	kc.CurrentContext = "local"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
