// Command tether-demo runs Tether's main job on an embedded default: a full
// local cluster on loopback (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok fake nodes, JobSet, Kubeflow Trainer, Kueue; see
// test/framework/localcluster), Tether's control plane installed from manifests/,
// then one queued TrainJob with the one label a platform team adds. It
// prints each step as it happens: queued, admitted by Kueue, pod injected,
// sidecar registered, heartbeats with progress, checkpoints verified during
// training, trainer exit, manifest verified, Succeeded; and where to look.
//
// kwok runs no containers: the real cmd/sidecar binary and a trainer
// stand-in run as local processes for the injected pod (PodRunner), with the
// environment, token and files the pod spec gives the sidecar.
// `make demo` runs it (after building the binaries once).
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testobj"
)

const (
	namespace = "ml-team"
	jobName   = "llm-finetune"
)

func main() {
	hold := flag.Bool("hold", false, "keep the cluster running after the demo (Ctrl-C stops it) to explore it with kubectl")
	flag.Parse()
	// The demo tells its own story; client-side logs are silenced.
	klog.SetLogger(logr.Discard())
	ctrl.SetLogger(logr.Discard())
	if err := run(*hold); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		os.Exit(1)
	}
}

// clusterOptions is the cluster the demo starts: kwok nodes, Trainer
// v2.3.0 and Kueue. `make demo` builds its Components (hack/testbin.sh's
// demo group; main_test.go keeps the two equal).
func clusterOptions() localcluster.Options { return localcluster.Options{Kueue: true} }

func step(format string, args ...any) {
	fmt.Printf("\n==> %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func detail(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }

func run(hold bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	step("starting a local cluster on loopback (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, JobSet, Trainer v2.3.0, Kueue v0.17.0)")
	start := time.Now()
	opts := clusterOptions()
	opts.KeepDir = hold
	opts.Log = func(f string, a ...any) { detail(f, a...) }
	c, err := localcluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Stop(); err != nil {
			detail("stopping the cluster: %v", err)
		}
	}()
	detail("cluster up in %s; logs of every component in %s", time.Since(start).Round(100*time.Millisecond), filepath.Join(c.Dir, "logs"))

	step("installing Tether from manifests/overlays/self-managed (CRD, RBAC, webhook) and running cmd/tether-control-plane as its ServiceAccount")
	start = time.Now()
	tether, err := c.StartTether(ctx, localcluster.TetherOptions{Args: []string{"--status-interval=2s"}})
	if err != nil {
		return err
	}
	replica := tether.Replicas()[0]
	detail("control plane ready in %s; webhook %s, binding server %s", time.Since(start).Round(100*time.Millisecond), replica.WebhookAddr, tether.BindingURL())
	runner := c.NewPodRunner()
	runner.SidecarEnv = []string{"TETHER_SYNC_INTERVAL=1s", "TETHER_SETTLE_TIME=1s", "TETHER_LOG_LEVEL=warn"}
	runner.Plan = func(*corev1.Pod) localcluster.TrainerPlan {
		return localcluster.TrainerPlan{Steps: 12, CheckpointEvery: 3, StepInterval: time.Second}
	}
	runner.Start(ctx)

	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	if err := c.LocalQueue(ctx, namespace, "team-queue"); err != nil {
		return err
	}
	step("creating TrainJob %s/%s in Kueue queue team-queue, with the one label Tether needs: %s: %q", namespace, jobName, names.BindLabel, names.BindValue)
	// A 2s heartbeat (default 10s) so the demo shows a few.
	tj := testobj.MakeTrainJob(jobName, namespace).Queue("team-queue").Bound().Annotation(names.HeartbeatIntervalAnnotation, "2s").Obj()
	tj.Spec.RuntimeRef.Name = localcluster.RuntimeName
	if err := c.Client.Create(ctx, tj); err != nil {
		return err
	}
	detail("Kueue suspended it (spec.suspend=%v); Tether's webhook stamped %s=%s", ptr.Deref(tj.Spec.Suspend, false),
		names.JobIDAnnotation, tj.Annotations[names.JobIDAnnotation])

	if err := follow(ctx, c); err != nil {
		return err
	}

	step("where to look")
	detail("kubectl --kubeconfig %s get workerbindings -A", c.Kubeconfig)
	if out, err := exec.Command(filepath.Join(c.Assets, "kubectl"), "--kubeconfig", c.Kubeconfig, "get", "workerbindings", "-A").CombinedOutput(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			detail("  %s", l)
		}
	}
	detail("kubectl --kubeconfig %s describe trainjob -n %s %s   (Events: Injected, Registered, TrainerSucceeded, ...)", c.Kubeconfig, namespace, jobName)
	// /metrics is HTTPS for readers bound to tether-metrics-reader; the
	// demo's scrape below creates the ServiceAccount this uses.
	detail("curl -sk -H \"Authorization: Bearer $(kubectl --kubeconfig %s -n tether-system create token tether-metrics-scraper)\" https://%s/metrics | grep tether_job_",
		c.Kubeconfig, replica.MetricsAddr)
	if text, err := replica.Metrics(); err == nil {
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "tether_job_phase{") && strings.HasSuffix(l, " 1") {
				detail("  %s", l)
			}
		}
	}
	detail("stored artifacts (fs backend): %s", tether.ArtifactDir)
	_ = filepath.WalkDir(tether.ArtifactDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, "/.tether/") {
			info, _ := d.Info()
			rel, _ := filepath.Rel(tether.ArtifactDir, p)
			detail("  %-72s %9d bytes", rel, info.Size())
		}
		return nil
	})
	if hold {
		step("holding the cluster; Ctrl-C stops every process (export KUBECONFIG=%s)", c.Kubeconfig)
		<-ctx.Done()
	}
	return nil
}

// follow prints the job's way from queued to Succeeded as it happens.
func follow(ctx context.Context, c *localcluster.Cluster) error {
	deadline := time.Now().Add(3 * time.Minute)
	var (
		admitted, injected bool
		lastPhase          string
		heartbeats         int
		lastSeq            int64
		uploaded           int64
	)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		var tj = testobj.MakeTrainJob(jobName, namespace).Obj()
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(tj), tj); err != nil {
			return err
		}
		if !admitted && !ptr.Deref(tj.Spec.Suspend, true) {
			admitted = true
			step("Kueue admitted the TrainJob: unsuspended; Trainer creates the JobSet, JobSet the Job, the Job the trainer pod")
		}
		if !injected {
			var pods corev1.PodList
			if err := c.Client.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
				return err
			}
			for _, p := range pods.Items {
				if trainjob.IsInjected(&p) {
					injected = true
					sc := p.Spec.InitContainers[len(p.Spec.InitContainers)-1]
					step("pod %s admitted with the sidecar injected: init container %q (restartPolicy %s), image %s", p.Name, sc.Name, *sc.RestartPolicy, sc.Image)
					detail("kwok ran it on %s; the sidecar and a trainer stand-in run as local processes (logs in %s)", p.Spec.NodeName, filepath.Join(c.Dir, "pods", namespace))
				}
			}
		}
		wb := &tetherv1.WorkerBinding{}
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: jobName}, wb); err != nil {
			continue
		}
		st := wb.Status
		if phase := string(st.Phase) + "/" + st.Reason; phase != lastPhase {
			lastPhase = phase
			step("WorkerBinding %s: %s (%s)", phase, st.Message, describe(wb))
		}
		// Heartbeats arrive every second; the binding records them at most
		// every --status-interval (2s here, 30s by default).
		if st.Phase == tetherv1.PhaseRunning && st.LastSeq != lastSeq && st.LastHeartbeatTime != nil && heartbeats < 6 {
			lastSeq = st.LastSeq
			heartbeats++
			progress := "no progress line yet"
			if p := st.Progress; p != nil && p.Step != nil {
				progress = fmt.Sprintf("step %d, loss %s", *p.Step, p.Loss)
			}
			detail("heartbeat seq %d recorded at %s: %s", st.LastSeq, st.LastHeartbeatTime.Format("15:04:05"), progress)
		}
		if a := st.Artifacts; a != nil && a.UploadedBytes > uploaded && !lifecycle.IsFinal(st.Phase) {
			uploaded = a.UploadedBytes
			detail("artifacts verified so far (single PUT, ETag = MD5 checked): %d bytes", uploaded)
		}
		switch st.Phase {
		case tetherv1.PhaseSucceeded:
			a := st.Artifacts
			detail("manifest %s verified: %d files, %d bytes; trainer exit code %d", a.Manifest, a.Files, a.Bytes, ptr.Deref(st.TrainerExitCode, -1))
			return nil
		case tetherv1.PhaseFailed:
			return fmt.Errorf("the binding failed: %s: %s", st.Reason, st.Message)
		}
	}
	return fmt.Errorf("the job did not finish within 3 minutes; see the logs in %s", c.Dir)
}

func describe(wb *tetherv1.WorkerBinding) string {
	parts := []string{fmt.Sprintf("attempt %d", wb.Status.Attempt)}
	if w := wb.Status.Worker; w != nil {
		parts = append(parts, "worker pod "+w.PodName)
	}
	return strings.Join(parts, ", ")
}
