// Command tether-demo runs Tether's main job on an embedded default: a local
// control plane (kube-apiserver + etcd built by hack/testbin.sh, Trainer's
// CRDs), Tether's control plane in-process as its ServiceAccount, then a
// labeled TrainJob and a JobSet-style trainer pod, printing each step and what
// was injected; then the real sidecar binary registers, heartbeats, uploads a
// stand-in trainer's checkpoints, and the job ends Succeeded with verified
// artifacts. `make demo` runs it.
//
// There is no kubelet here: pods are admitted and stored, not run; the demo
// runs the sidecar as a local process and writes the pod status the kubelet
// would.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/testenv"
	"github.com/tether-dev/tether/internal/testobj"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
)

func main() {
	keep := flag.Bool("keep", false, "keep the local control plane running after the demo (Ctrl-C to stop) and print a KUBECONFIG to explore it")
	flag.Parse()
	// The demo prints its own story; components log errors only.
	klog.SetLogger(logr.Discard())
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	if err := run(*keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func run(keep bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	step("starting a local control plane (kube-apiserver v1.37.2 + etcd 3.6.16, Trainer v2.3 CRDs) and Tether as its ServiceAccount")
	start := time.Now()
	// One replica: no leader election to hand over at exit.
	env, err := testenv.Start(ctx, testenv.Options{ControlPlane: func(o *controlplane.Options) { o.LeaderElect = false }})
	if err != nil {
		return err
	}
	defer env.Stop()
	fmt.Printf("    up in %s; webhook at https://%s:%d, metrics at http://%s/metrics\n",
		time.Since(start).Round(100*time.Millisecond), env.Webhook.LocalServingHost, env.Webhook.LocalServingPort, env.MetricsAddr)
	dir, err := os.MkdirTemp("", "tether-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig, err := env.Kubeconfig(dir)
	if err != nil {
		return err
	}
	c := env.Client

	const ns, name = "ml-team", "llama-finetune"
	step("creating namespace %s (Pod Security: restricted)", ns)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); err != nil {
		return err
	}

	step("creating TrainJob %s/%s with the one label: %s=%s (and a Kueue queue)", ns, name, jobconfig.BindLabel, jobconfig.BindValue)
	tj := testobj.MakeTrainJob(name, ns).Bound().Queue("gpu-queue").Suspend(true).
		Annotation(jobconfig.ArtifactPathAnnotation, "/workspace/output").
		Annotation(jobconfig.ExcludeAnnotation, "**/*.tmp").Obj()
	if err := c.Create(ctx, tj); err != nil {
		return err
	}
	fmt.Printf("    admitted; the TrainJob webhook stamped:\n      %s: %s\n      %s: %s\n",
		jobconfig.JobIDAnnotation, tj.Annotations[jobconfig.JobIDAnnotation],
		jobconfig.WorkerIDAnnotation, tj.Annotations[jobconfig.WorkerIDAnnotation])

	step("waiting for the controller: token Secret + WorkerBinding")
	wb := &tetherv1.WorkerBinding{}
	if err := poll(ctx, 20*time.Second, func() bool {
		return c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, wb) == nil && wb.Status.Phase != ""
	}); err != nil {
		return fmt.Errorf("no WorkerBinding: %w", err)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: mutate.TokenSecretName(name)}, secret); err != nil {
		return err
	}
	fmt.Printf("    Secret %s: type %s, keys token (%d hex chars, never printed) and ca.crt (%d bytes), owned by TrainJob %s\n",
		secret.Name, secret.Type, len(secret.Data["token"]), len(secret.Data["ca.crt"]), secret.OwnerReferences[0].Name)
	kubectl(kubeconfig, "get", "workerbindings", "-n", ns, "-o", "wide")

	step("creating the trainer pod JobSet would create for it (replicated job \"node\", index 0)")
	pod := testobj.MakeTrainerPod(name, ns).RestrictedPodSecurity().Obj()
	if err := c.Create(ctx, pod); err != nil {
		return err
	}
	fmt.Printf("    admitted as %s; %s: %s\n", pod.Name, jobconfig.PodStatusAnnotation, pod.Annotations[jobconfig.PodStatusAnnotation])
	injected := struct {
		InitContainers []corev1.Container   `json:"initContainers"`
		Volumes        []corev1.Volume      `json:"volumes"`
		TrainerMounts  []corev1.VolumeMount `json:"trainerVolumeMounts"`
	}{pod.Spec.InitContainers, pod.Spec.Volumes, pod.Spec.Containers[0].VolumeMounts}
	out, _ := yaml.Marshal(injected)
	fmt.Println("    what the pod webhook injected:")
	fmt.Println(indent(string(out), "      "))

	step("creating an initializer pod of the same job: left untouched")
	initPod := testobj.MakeTrainerPod(name, ns).ReplicatedJob("dataset-initializer").RestrictedPodSecurity().Obj()
	if err := c.Create(ctx, initPod); err != nil {
		return err
	}
	fmt.Printf("    admitted as %s with %d init containers\n", initPod.Name, len(initPod.Spec.InitContainers))

	if err := runWorker(ctx, env, c, pod, dir); err != nil {
		return err
	}
	kubectl(kubeconfig, "get", "workerbindings", "-n", ns, "-o", "wide")

	step("Events on the TrainJob")
	time.Sleep(time.Second) // Events are sent asynchronously.
	kubectl(kubeconfig, "get", "events", "-n", ns, "--field-selector", "involvedObject.kind=TrainJob", "-o",
		"custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message")

	step("Tether's metrics (http://%s/metrics)", env.MetricsAddr)
	printMetrics(env.MetricsAddr)

	fmt.Println("\nDone. Where to look in a real cluster: `kubectl get workerbindings -A`, `kubectl describe trainjob <name>` (Events),")
	fmt.Println("the control plane's /metrics (tether_* and controller_runtime_webhook_latency_seconds).")
	if keep {
		fmt.Printf("\nThe local control plane keeps running. Explore it with:\n  export KUBECONFIG=%s\n  %s get workerbindings -A\nCtrl-C stops it.\n", kubeconfig, env.Kubectl())
		<-ctx.Done()
	}
	return nil
}

func kubectl(kubeconfig string, args ...string) {
	cmd := exec.Command(testenvKubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	fmt.Println(indent(strings.TrimRight(string(out), "\n"), "    "))
	if err != nil {
		fmt.Println("    (kubectl:", err, ")")
	}
}

func testenvKubectl() string {
	dir, _ := testenv.Assets()
	return dir + "/kubectl"
}

func printMetrics(addr string) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		fmt.Println("    ", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "tether_") && !strings.Contains(line, "_bucket{") {
			fmt.Println("    " + line)
		}
	}
}

func poll(ctx context.Context, timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}
