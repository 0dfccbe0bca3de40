package binding

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/progress"
	"github.com/tether-dev/tether/pkg/sidecar/session"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

var nsCounter int

// job is a bound TrainJob with its injected trainer pod, and the files the
// kubelet would mount into its sidecar.
type job struct {
	ns, name    string
	pod         *corev1.Pod
	tokenFile   string
	caFile      string
	artifactDir string
	// podTokenFile holds the pod's projected ServiceAccount token, as the
	// kubelet would mount it (testenv.WritePodToken).
	podTokenFile string
}

// newJob creates a namespace, a bound TrainJob (with extra annotations), waits
// for its binding, and creates its injected node-0 pod.
func newJob(t *testing.T, annotations map[string]string) *job {
	t.Helper()
	ctx := context.Background()
	nsCounter++
	j := &job{ns: fmt.Sprintf("bind-%d", nsCounter), name: "train"}
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: j.ns}})
	mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: j.ns}})
	tw := testobj.MakeTrainJob(j.name, j.ns).Bound()
	for k, v := range annotations {
		tw.Annotation(k, v)
	}
	mustCreate(t, tw.Obj())
	// The kubelet mounts the token only once the Secret exists.
	secret := &corev1.Secret{}
	eventually(t, 15*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: binding.TokenSecretName(j.name)}, secret)
	})
	j.waitPhase(t, tetherv1.PhasePending, "")
	j.pod = testobj.MakeTrainerPod(j.name, j.ns).Routed().Obj()
	mustCreate(t, j.pod)
	if len(j.pod.Spec.InitContainers) == 0 {
		t.Fatal("trainer pod was not injected")
	}
	j.writeFiles(t, secret)
	return j
}

// writeFiles writes the files the kubelet would mount into j.pod's sidecar:
// the job's token and CA from its Secret, and the pod's token.
func (j *job) writeFiles(t *testing.T, secret *corev1.Secret) {
	t.Helper()
	dir := t.TempDir()
	j.tokenFile, j.caFile, j.artifactDir = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt"), filepath.Join(dir, "artifacts")
	j.podTokenFile = filepath.Join(dir, "pod-token")
	for path, data := range map[string][]byte{j.tokenFile: secret.Data["token"], j.caFile: secret.Data["ca.crt"]} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(j.artifactDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WritePodToken(context.Background(), clientset(t), j.pod, j.podTokenFile); err != nil {
		t.Fatal(err)
	}
}

// podToken is the pod token the kubelet would give j.pod's sidecar.
func (j *job) podToken(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(j.podTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// clientset is an admin clientset of the environment (it mints pod tokens
// as the kubelet does).
func clientset(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// jobController is a client acting as the Job controller, which alone may
// create a bound job's trainer pods (testenv.JobControllerClient).
func jobController(t *testing.T) client.Client {
	t.Helper()
	c, err := env.JobControllerClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sidecarEnv is the injected sidecar's environment, resolved as the kubelet would.
func (j *job) sidecarEnv() map[string]string { return testenv.SidecarEnv(j.pod) }

// clientConfig is the configuration cmd/sidecar builds from that environment,
// with this test's files in place of the kubelet's mounts.
func (j *job) clientConfig() session.Config {
	e := j.sidecarEnv()
	interval, _ := time.ParseDuration(e[names.EnvHeartbeatInterval])
	return session.Config{
		ServerURL: e[names.EnvServerURL], TokenFile: j.tokenFile, PodTokenFile: j.podTokenFile, CAFile: j.caFile,
		JobID: e[names.EnvJobID], WorkerID: e[names.EnvWorkerID],
		Pod:               binding.PodIdentity{Namespace: e[names.EnvPodNamespace], Name: e[names.EnvPodName], UID: e[names.EnvPodUID]},
		HeartbeatInterval: interval,
		BackoffInitial:    50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		Progress: progress.NewReader(j.artifactDir).Progress,
	}
}

// runningClient runs a client until the test ends; its Run error is returned
// on the channel.
func runningClient(t *testing.T, cfg session.Config) (*session.Client, context.CancelFunc, <-chan error) {
	t.Helper()
	c, err := session.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var once sync.Once
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { once.Do(cancel) })
	return c, cancel, done
}

// finishAndStop is a sidecar whose pod terminates: it reports finishing
// (SIGTERM), then its session client stops.
func finishAndStop(t *testing.T, c *session.Client, stop context.CancelFunc, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Finish(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
}

func (j *job) binding(t *testing.T) *tetherv1.WorkerBinding {
	t.Helper()
	wb := &tetherv1.WorkerBinding{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, wb); err != nil {
		t.Fatal(err)
	}
	return wb
}

func (j *job) waitPhase(t *testing.T, phase tetherv1.WorkerBindingPhase, reason string) *tetherv1.WorkerBinding {
	t.Helper()
	var wb *tetherv1.WorkerBinding
	eventually(t, 20*time.Second, func() error {
		wb = &tetherv1.WorkerBinding{}
		if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: j.ns, Name: j.name}, wb); err != nil {
			return err
		}
		if wb.Status.Phase != phase || (reason != "" && wb.Status.Reason != reason) {
			return fmt.Errorf("phase %s/%s (%s), want %s/%s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message, phase, reason)
		}
		return nil
	})
	return wb
}

func mustCreate(t *testing.T, o client.Object) {
	t.Helper()
	if err := env.Client.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

// metrics scrapes the control plane's /metrics (as a metrics reader) and
// returns the lines that start with prefix.
func metrics(t *testing.T, prefix string) []string {
	t.Helper()
	body, err := env.ScrapeMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

func jobLabel(j *job) string {
	return fmt.Sprintf(`namespace="%s",trainjob="%s"`, j.ns, j.name)
}

// nodeLabel is the label set of a per-node series (labels sort by name).
func nodeLabel(j *job, rank int) string {
	return fmt.Sprintf(`namespace="%s",node="%d",trainjob="%s"`, j.ns, rank, j.name)
}

// waitRegistered waits until both nodes of a 2-node job have registered.
func waitRegistered(t *testing.T, nodes [2]*job) {
	t.Helper()
	eventually(t, 20*time.Second, func() error {
		wb := nodes[0].binding(t)
		for r := range int32(2) {
			if n := nodeOf(wb, r); n == nil || n.PodUID == "" || n.RegisteredTime == nil {
				return fmt.Errorf("node %d not registered yet: %+v", r, wb.Status.Nodes)
			}
		}
		return nil
	})
}
