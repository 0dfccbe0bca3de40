package directupload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/sidecar/session"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/s3server"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

const (
	s3Access = "tether-it-access"
	s3Secret = "tether-it-secret-0123456789"
	bucket   = "tether-artifacts"
)

// suite is a control plane storing into a bucket of a real S3 server
// (versitygw unless a test picks another).
type suite struct {
	env *testenv.Env
	s3  *s3server.Server
	// creds is the directory of the bucket's credentials files.
	creds string
}

// start runs versitygw and a control plane with the s3 backend, modified by mod.
func start(t *testing.T, mod func(*controlplane.Options)) *suite {
	t.Helper()
	s := startStore(t, s3server.VersityGW)
	s.env = testenv.StartForTest(t, testenv.Options{ControlPlane: s.controlPlane(mod)})
	return s
}

// startStore runs S3 server impl with the suite's bucket; the control plane
// is the caller's to start (controlPlane configures it).
func startStore(t *testing.T, impl s3server.Impl) *suite {
	t.Helper()
	ctx := context.Background()
	s3, err := s3server.Start(ctx, s3server.Options{Impl: impl, Dir: t.TempDir(), AccessKey: s3Access, SecretKey: s3Secret})
	if errors.Is(err, s3server.ErrNoBinary) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s3.Stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", impl, s3.Output())
		}
	})
	if err := s3.MakeBucket(ctx, bucket, false); err != nil {
		t.Fatal(err)
	}
	creds := t.TempDir()
	for name, v := range map[string]string{"access-key": s3Access, "secret-key": s3Secret} {
		if err := os.WriteFile(filepath.Join(creds, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return &suite{s3: s3, creds: creds}
}

// controlPlane configures the s3 backend on the suite's bucket, then mod.
func (s *suite) controlPlane(mod func(*controlplane.Options)) func(*controlplane.Options) {
	return func(o *controlplane.Options) {
		o.ArtifactBackend = "s3"
		o.S3 = controlplane.S3Options{Endpoint: s.s3.Endpoint, Bucket: bucket, Region: "us-east-1", Insecure: true, CredentialsDir: s.creds}
		mod(o)
	}
}

// keys lists the bucket's keys under prefix.
func (s *suite) keys(t *testing.T, prefix string) []string {
	t.Helper()
	var out []string
	for oi := range s.s3.Admin.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			t.Fatal(oi.Err)
		}
		out = append(out, oi.Key)
	}
	return out
}

// job is a bound TrainJob with its injected node-0 pod and what the
// kubelet would mount into its sidecar.
type job struct {
	s                  *suite
	ns, name           string
	pod                *corev1.Pod
	token              []byte
	tokenFile, caFile  string
	podTokenFile       string
	artifactDir, jobID string
	caPool             *x509.CertPool
}

func (s *suite) newJob(t *testing.T, ns string) *job {
	t.Helper()
	ctx := context.Background()
	j := &job{s: s, ns: ns, name: "train"}
	s.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	s.create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}})
	s.create(t, testobj.MakeTrainJob(j.name, ns).Bound().Annotation("tether.dev/heartbeat-interval", "1s").Obj())
	secret := &corev1.Secret{}
	testenv.Eventually(t, 15*time.Second, func() error {
		return s.env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName(j.name)}, secret)
	})
	j.waitPhase(t, tetherv1.PhasePending)
	j.pod = testobj.MakeTrainerPod(j.name, ns).Routed().Obj()
	s.create(t, j.pod)
	dir := t.TempDir()
	j.token = secret.Data["token"]
	j.tokenFile, j.caFile, j.artifactDir = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "artifacts")
	for path, data := range map[string][]byte{j.tokenFile: j.token, j.caFile: secret.Data["ca.crt"]} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(j.artifactDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The pod token the kubelet would project into the sidecar.
	j.podTokenFile = filepath.Join(dir, "pod-token")
	cs, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.WritePodToken(ctx, cs, j.pod, j.podTokenFile); err != nil {
		t.Fatal(err)
	}
	j.caPool = x509.NewCertPool()
	j.caPool.AppendCertsFromPEM(secret.Data["ca.crt"])
	j.jobID = testenv.SidecarEnv(j.pod)[names.EnvJobID]
	return j
}

func (s *suite) create(t *testing.T, o client.Object) {
	t.Helper()
	if err := s.env.Client.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

// register runs the sidecar's session client until the test ends.
func (j *job) register(t *testing.T) {
	t.Helper()
	e := testenv.SidecarEnv(j.pod)
	c, err := session.NewClient(session.Config{
		ServerURL: e[names.EnvServerURL], TokenFile: j.tokenFile, PodTokenFile: j.podTokenFile, CAFile: j.caFile,
		JobID: e[names.EnvJobID], WorkerID: e[names.EnvWorkerID],
		Pod:               binding.PodIdentity{Namespace: e[names.EnvPodNamespace], Name: e[names.EnvPodName], UID: e[names.EnvPodUID]},
		HeartbeatInterval: time.Second, BackoffInitial: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = c.Run(ctx) }()
	t.Cleanup(cancel)
	j.waitPhase(t, tetherv1.PhaseRunning)
}

// flush is the sidecar's final flush: the artifact directory, then its manifest.
func (j *job) flush(t *testing.T) {
	t.Helper()
	e := testenv.SidecarEnv(j.pod)
	up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: e[names.EnvServerURL], JobID: j.jobID, TokenFile: j.tokenFile, PodTokenFile: j.podTokenFile, CAFile: j.caFile})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := artifacts.NewScanner(artifacts.ScannerConfig{Dir: j.artifactDir, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.NewSyncer(artifacts.SyncerConfig{Scanner: sc, Uploader: up, JobID: j.jobID, PodUID: e[names.EnvPodUID]})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v (%+v)", err, rep)
	}
}

// succeed ends the trainer with exit 0 and completes the TrainJob, as the
// kubelet and Trainer would (neither runs here).
func (j *job) succeed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	j.pod.Status.Phase = corev1.PodRunning
	j.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.Now()}}}}
	if err := j.s.env.Client.Status().Update(ctx, j.pod); err != nil {
		t.Fatal(err)
	}
	tj := &trainer.TrainJob{}
	if err := j.s.env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: j.name}, tj); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&tj.Status.Conditions, metav1.Condition{Type: "Complete", Status: metav1.ConditionTrue, Reason: "Complete", Message: "jobset completed"})
	if err := j.s.env.Client.Status().Update(ctx, tj); err != nil {
		t.Fatal(err)
	}
	j.waitPhase(t, tetherv1.PhaseSucceeded)
}

func (j *job) binding(t *testing.T) *tetherv1.WorkerBinding {
	t.Helper()
	wb := &tetherv1.WorkerBinding{}
	if err := j.s.env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, wb); err != nil {
		t.Fatal(err)
	}
	return wb
}

func (j *job) waitPhase(t *testing.T, phase tetherv1.WorkerBindingPhase) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		wb := &tetherv1.WorkerBinding{}
		if err := j.s.env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, wb); err != nil {
			return err
		}
		if wb.Status.Phase != phase {
			return fmt.Errorf("phase %s/%s (%s), want %s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message, phase)
		}
		return nil
	})
}

// authorize asks the binding server for a direct upload of size bytes to
// the job's key rel, as the sidecar does.
func (j *job) authorize(t *testing.T, rel string, size int64) upload.AuthorizeResponse {
	t.Helper()
	resp := j.askAuthorize(t, rel, size)
	defer resp.Body.Close()
	var a upload.AuthorizeResponse
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&a) != nil || a.Mode != upload.ModeDirect {
		t.Fatalf("authorize %s: %d %+v, want a direct upload", rel, resp.StatusCode, a)
	}
	return a
}

// askAuthorize is authorize's request, answered whatever it is.
func (j *job) askAuthorize(t *testing.T, rel string, size int64) *http.Response {
	t.Helper()
	body, _ := json.Marshal(upload.AuthorizeRequest{Key: j.jobID + "/" + rel, Size: size})
	req, err := http.NewRequest(http.MethodPost, j.s.env.BindingURL+upload.PathAuthorize, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(names.HeaderArtifactToken, string(bytes.TrimSpace(j.token)))
	req.Header.Set(names.HeaderArtifactPodUID, string(j.pod.UID))
	podToken, err := os.ReadFile(j.podTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(names.HeaderPodToken, string(bytes.TrimSpace(podToken)))
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: j.caPool}}, Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// put sends body through a presigned URL, without the token, as the
// sidecar does, and returns the store's status (0: the store cut the
// connection, as versitygw does when it refuses before the body).
func put(t *testing.T, a upload.AuthorizeResponse, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, a.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	for k, v := range a.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Logf("presigned PUT: %v", err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
