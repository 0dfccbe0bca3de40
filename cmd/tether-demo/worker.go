package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/testenv"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/mutate"
)

// runWorker plays the kubelet for the injected pod: no kubelet runs here, so
// the real cmd/sidecar binary runs as a local process with exactly the
// environment, token and CA the pod spec gives it, next to a stand-in trainer
// that writes checkpoints and progress, then exits 0.
func runWorker(ctx context.Context, env *testenv.Env, c client.Client, pod *corev1.Pod, dir string) error {
	ns, name := pod.Namespace, pod.Labels["jobset.sigs.k8s.io/jobset-name"]
	bin := filepath.Join(dir, "tether-sidecar")
	step("building cmd/sidecar and starting it as the pod's sidecar would run (token and CA from the Secret, env from the pod spec)")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sidecar")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the sidecar: %v\n%s", err, out)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: mutate.TokenSecretName(name)}, secret); err != nil {
		return err
	}
	tokenDir, artifacts := filepath.Join(dir, "token"), filepath.Join(dir, "artifacts")
	for _, d := range []string{tokenDir, artifacts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for k, v := range secret.Data {
		if err := os.WriteFile(filepath.Join(tokenDir, k), v, 0o600); err != nil {
			return err
		}
	}
	// The environment the pod spec gives the sidecar, with the kubelet's
	// mounts (token, CA, artifacts) at local paths.
	cmdEnv := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range testenv.SidecarEnv(pod) {
		switch k {
		case binding.EnvTokenFile:
			v = filepath.Join(tokenDir, "token")
		case binding.EnvCAFile:
			v = filepath.Join(tokenDir, "ca.crt")
		case binding.EnvArtifactDir:
			v = artifacts
		}
		cmdEnv = append(cmdEnv, k+"="+v)
	}
	// Short settle and sync times so the demo shows uploads during training.
	cmdEnv = append(cmdEnv, "TETHER_SYNC_INTERVAL=1s", "TETHER_SETTLE_TIME=1s", "TETHER_LOG_LEVEL=warn")
	proc := exec.Command(bin)
	proc.Env = cmdEnv
	logFile, err := os.Create(filepath.Join(dir, "sidecar.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	proc.Stdout, proc.Stderr = logFile, logFile
	if err := proc.Start(); err != nil {
		return err
	}
	defer func() { _ = proc.Process.Kill(); _, _ = proc.Process.Wait() }()
	fmt.Printf("    sidecar pid %d, artifacts in %s, its log in %s\n", proc.Process.Pid, artifacts, logFile.Name())

	wb := &tetherv1.WorkerBinding{}
	key := types.NamespacedName{Namespace: ns, Name: name}
	waitFor := func(what string, ok func() bool) error {
		if err := poll(ctx, 30*time.Second, func() bool { return c.Get(ctx, key, wb) == nil && ok() }); err != nil {
			return fmt.Errorf("%s: %w (phase %s/%s: %s)", what, err, wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
		}
		return nil
	}
	if err := waitFor("registration", func() bool { return wb.Status.Phase == tetherv1.PhaseRunning }); err != nil {
		return err
	}
	fmt.Printf("    registered (attempt %d, pod %s) and heartbeating: phase %s\n", wb.Status.Attempt, wb.Status.Worker.PodName, wb.Status.Phase)

	step("the stand-in trainer writes checkpoints and progress into the shared artifact directory")
	for i := 1; i <= 3; i++ {
		write := func(rel, data string) error {
			p := filepath.Join(artifacts, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return os.WriteFile(p, []byte(data), 0o644)
		}
		if err := write(fmt.Sprintf("checkpoints/step-%d00.pt", i), strings.Repeat(fmt.Sprintf("weights %d ", i), 50_000)); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(artifacts, binding.ProgressFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, `{"step": %d00, "epoch": %d.0, "loss": %.3f, "fraction": %.2f}`+"\n", i, i, 1.0/float64(i+1), float64(i)/3)
		f.Close()
		time.Sleep(time.Second)
	}
	if err := waitFor("checkpoints uploaded", func() bool {
		return wb.Status.Artifacts != nil && wb.Status.Artifacts.UploadedBytes > 0 && wb.Status.Progress != nil
	}); err != nil {
		return err
	}
	fmt.Printf("    during training: %d bytes verified on the server, progress step %d loss %s\n",
		wb.Status.Artifacts.UploadedBytes, *wb.Status.Progress.Step, wb.Status.Progress.Loss)

	step("the trainer writes its final model and exits 0; the kubelet would record that and SIGTERM the sidecar")
	if err := os.WriteFile(filepath.Join(artifacts, "model.safetensors"), []byte(strings.Repeat("final ", 200_000)), 0o644); err != nil {
		return err
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.Now()}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		return err
	}
	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := proc.Wait(); err != nil {
		return fmt.Errorf("sidecar exited: %w (log: %s)", err, logFile.Name())
	}
	pod.Status.Phase = corev1.PodSucceeded
	if err := c.Status().Update(ctx, pod); err != nil {
		return err
	}
	if err := waitFor("Succeeded", func() bool { return wb.Status.Phase == tetherv1.PhaseSucceeded }); err != nil {
		return err
	}
	a := wb.Status.Artifacts
	fmt.Printf("    sidecar flushed and exited 0; manifest %s verified: %d files, %d bytes\n", a.Manifest, a.Files, a.Bytes)
	fmt.Printf("    binding %s: %s\n", wb.Status.Phase, wb.Status.Message)
	fmt.Printf("    stored objects (fs backend) under %s:\n", filepath.Join(env.ArtifactDir, wb.Spec.JobID))
	_ = filepath.WalkDir(filepath.Join(env.ArtifactDir, wb.Spec.JobID), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, "/.tether/") {
			info, _ := d.Info()
			rel, _ := filepath.Rel(env.ArtifactDir, p)
			fmt.Printf("      %-70s %9d bytes\n", rel, info.Size())
		}
		return nil
	})
	return nil
}
