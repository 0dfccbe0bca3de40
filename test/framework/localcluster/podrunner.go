package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// TrainerPlan is what the trainer stand-in of one pod does (its flags).
type TrainerPlan struct {
	Steps, CheckpointEvery, ExitCode, StartStep int
	StepInterval                                time.Duration
	// CorruptFirstCheckpoint overwrites the run's first checkpoint with
	// garbage before a non-zero exit, as a crash while re-saving it would.
	CorruptFirstCheckpoint bool
	// CheckpointMode and ModelMode are the files' modes (octal, e.g. "0600";
	// default 0644).
	CheckpointMode, ModelMode string
	// Resume continues after the last checkpoint in the directory (the same
	// args serve every attempt of a TrainJob), to Steps in all.
	Resume bool
	// Shards writes sharded checkpoints: a shard per rank, rank 0 also the
	// checkpoint's .metadata and the only final model.
	Shards bool
	// FailRuns fails (with ExitCode) only the first FailRuns runs in one
	// artifact directory: a container restarted in place keeps it.
	FailRuns int
	// FailAfterSteps stops a failing run after that many steps.
	FailAfterSteps int
	// CheckpointBytes and ModelBytes are the sizes of each checkpoint
	// (default 256 KiB) and of the final model (default three checkpoints).
	CheckpointBytes, ModelBytes int
	// SmallFiles is how many small files (4 KiB) the run writes under
	// small/ after its first step.
	SmallFiles int
	// RewriteLatest replaces checkpoints/latest.pt at every checkpoint: a
	// file rewritten, often while its previous version uploads.
	RewriteLatest bool
	// Record is a file (outside the pod) where the run appends every file
	// version it closes, synced (soakcheck.ReadRecord reads it).
	Record string
	// StallAtStep and StallFor make the trainer stand still after that
	// step for that long (heartbeats go on), then go on.
	StallAtStep int
	StallFor    time.Duration
	// SidecarEnv, in PodRunner, is added to the environment of the pod's
	// sidecar (optional settings, e.g. TETHER_DIRECT_UPLOAD=off).
	SidecarEnv []string
	// FailPods, in PodRunner, fails (with ExitCode) only the first FailPods
	// pods it runs of each rank of the TrainJob; later pods exit 0.
	FailPods int
}

// Args are the stand-in's flags for artifact directory dir (a trainer
// container's args on the real node).
func (p TrainerPlan) Args(dir string) []string {
	args := []string{"--artifacts=" + dir}
	if p.Steps > 0 {
		args = append(args, fmt.Sprintf("--steps=%d", p.Steps))
	}
	if p.CheckpointEvery > 0 {
		args = append(args, fmt.Sprintf("--checkpoint-every=%d", p.CheckpointEvery))
	}
	if p.StepInterval > 0 {
		args = append(args, "--step-interval="+p.StepInterval.String())
	}
	if p.StartStep > 0 {
		args = append(args, fmt.Sprintf("--start-step=%d", p.StartStep))
	}
	if p.CorruptFirstCheckpoint {
		args = append(args, "--corrupt-first-checkpoint")
	}
	if p.Resume {
		args = append(args, "--resume")
	}
	if p.Shards {
		args = append(args, "--shards")
	}
	if p.FailRuns > 0 {
		args = append(args, fmt.Sprintf("--fail-runs=%d", p.FailRuns))
	}
	if p.FailAfterSteps > 0 {
		args = append(args, fmt.Sprintf("--fail-after-steps=%d", p.FailAfterSteps))
	}
	if p.CheckpointBytes > 0 {
		args = append(args, fmt.Sprintf("--checkpoint-bytes=%d", p.CheckpointBytes))
	}
	if p.ModelBytes > 0 {
		args = append(args, fmt.Sprintf("--model-bytes=%d", p.ModelBytes))
	}
	if p.Record != "" {
		args = append(args, "--record="+p.Record)
	}
	if p.SmallFiles > 0 {
		args = append(args, fmt.Sprintf("--small-files=%d", p.SmallFiles))
	}
	if p.RewriteLatest {
		args = append(args, "--rewrite-latest")
	}
	if p.StallAtStep > 0 && p.StallFor > 0 {
		args = append(args, fmt.Sprintf("--stall-at-step=%d", p.StallAtStep), "--stall-for="+p.StallFor.String())
	}
	if p.CheckpointMode != "" {
		args = append(args, "--checkpoint-mode="+p.CheckpointMode)
	}
	if p.ModelMode != "" {
		args = append(args, "--model-mode="+p.ModelMode)
	}
	return append(args, fmt.Sprintf("--exit-code=%d", p.ExitCode))
}

// PodRunner plays the kubelet for the pods Tether injected (kwok makes them
// Running but runs nothing). For each such pod it runs the real cmd/sidecar
// binary with the environment the pod spec gives it (downward API resolved
// from the Pod object), the token and CA from the Secret the pod mounts, the
// pod token the kubelet would project (TokenRequest bound to the pod,
// renewed at 80% of its life), and the artifact volume as a host directory; next to it the trainer stand-in
// in place of the trainer container. When the trainer exits it records the
// exit code in the Pod's status, SIGTERMs the sidecar (as the kubelet does
// with native sidecars once the main containers end), and finishes the pod.
// When the pod is deleted (eviction, preemption) it SIGTERMs the trainer,
// then the sidecar, waits up to the grace period, and removes the pod. A
// sidecar that exits while the trainer runs is started again, as the kubelet
// restarts a native sidecar (restartPolicy Always), and its restart counted
// in the pod's status.
type PodRunner struct {
	c          *Cluster
	sidecarBin string
	trainerBin string
	// Plan chooses each pod's trainer behaviour (default: TrainerPlan{}).
	Plan func(pod *corev1.Pod) TrainerPlan
	// ArtifactDir maps a pod to the host directory of its artifact volume.
	// Default: one directory per node of a TrainJob, kept across its pods,
	// as node-local storage or a PersistentVolumeClaim per rank would be (so
	// a resumed attempt sees the files of the one before, and each node of
	// a multi-node job only its own).
	ArtifactDir func(pod *corev1.Pod) string
	// Skip leaves a pod alone (it stays Running, nothing registers); a
	// skipped pod that is deleted is removed at once.
	Skip func(pod *corev1.Pod) bool
	// SidecarEnv is added to every sidecar's environment (optional settings
	// such as TETHER_SYNC_INTERVAL, never what the webhook injects).
	SidecarEnv []string

	mu   sync.Mutex
	pods map[types.UID]*runningPod
	// started counts the pods started per TrainJob rank (for FailPods).
	started map[string]int
	stop    chan struct{}
	done    chan struct{}
}

// runningPod is PodRunner's state of one pod; its fields but key and
// lastErr (sync's own) are guarded by PodRunner.mu.
type runningPod struct {
	key     types.NamespacedName
	sidecar *Process
	trainer *Process
	// sidecarStart starts the sidecar again (its name, binary, env).
	sidecarStart func() (*Process, error)
	// sidecarRestarts counts the sidecar's restarts.
	sidecarRestarts int
	finishing       bool
	finished        bool
	lastErr         string
	// podTokenFile is the sidecar's projected pod token, minted at
	// podTokenAt and renewed as the kubelet does (sync's own).
	podTokenFile string
	podTokenAt   time.Time
}

// podTokenRenewal is when the kubelet renews a projected token: at 80% of
// its life.
const podTokenRenewal = trainjob.PodTokenExpirationSeconds * time.Second * 8 / 10

// NewPodRunner prepares a runner; binaries come from StartTether's build.
func (c *Cluster) NewPodRunner() *PodRunner {
	binDir := filepath.Join(c.Dir, "bin")
	r := &PodRunner{
		c:          c,
		sidecarBin: filepath.Join(binDir, "sidecar"),
		trainerBin: filepath.Join(binDir, "trainer-standin"),
		Plan:       func(*corev1.Pod) TrainerPlan { return TrainerPlan{} },
		pods:       map[types.UID]*runningPod{},
		started:    map[string]int{},
	}
	r.ArtifactDir = func(pod *corev1.Pod) string {
		dir := filepath.Join(c.Dir, "volumes", pod.Namespace, pod.Labels[trainjob.JobSetNameLabel], "artifacts")
		if rank, err := trainjob.Rank(pod); err == nil && rank > 0 {
			dir += fmt.Sprintf("-node-%d", rank)
		}
		return dir
	}
	return r
}

// Start begins watching pods (a 100ms poll of the API server).
func (r *PodRunner) Start(ctx context.Context) {
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.done)
		for {
			r.sync(ctx)
			select {
			case <-r.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	r.c.onStop(r.Stop)
}

// Stop ends the watch and kills every process it started.
func (r *PodRunner) Stop() error {
	if r.stop == nil {
		return nil
	}
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rp := range r.pods {
		for _, p := range []*Process{rp.trainer, rp.sidecar} {
			if p != nil {
				_ = p.Signal(syscall.SIGCONT)
				_ = p.Stop(2 * time.Second)
			}
		}
	}
	return nil
}

// RunningSidecar is the sidecar process of a pod whose trainer still runs
// (nil if none: not started, or the pod is finishing, when the kubelet no
// longer restarts it).
func (r *PodRunner) RunningSidecar(pod types.UID) *Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rp := r.pods[pod]; rp != nil && !rp.finishing && !rp.finished && rp.sidecar != nil {
		if exited, _ := rp.sidecar.Exited(); !exited {
			return rp.sidecar
		}
	}
	return nil
}

// Sidecar is the sidecar process of the pod (nil if not started).
func (r *PodRunner) Sidecar(pod types.UID) *Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rp := r.pods[pod]; rp != nil {
		return rp.sidecar
	}
	return nil
}

func (r *PodRunner) sync(ctx context.Context) {
	var pods corev1.PodList
	if err := r.c.Client.List(ctx, &pods); err != nil {
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		// The real nodes' kubelets run their own pods.
		if pod.Annotations[names.PodStatusAnnotation] == "" || pod.Spec.NodeName == "" || r.c.RealNodeNamed(pod.Spec.NodeName) != nil {
			continue
		}
		skip := r.Skip != nil && r.Skip(pod)
		// The pod's state is decided under the lock: watchTrainer and
		// terminate change it from their own goroutines.
		r.mu.Lock()
		rp := r.pods[pod.UID]
		if rp == nil {
			rp = &runningPod{key: client.ObjectKeyFromObject(pod)}
			r.pods[pod.UID] = rp
		}
		start := false
		switch {
		case rp.finished:
		case pod.DeletionTimestamp != nil && !rp.finishing:
			rp.finishing = true
			go r.terminate(ctx, rp, pod)
		case skip:
		case pod.Status.Phase == corev1.PodRunning && rp.sidecar == nil && !rp.finishing:
			start = true
		}
		renew := !start && rp.sidecar != nil && !rp.finishing && rp.podTokenFile != "" && time.Since(rp.podTokenAt) > podTokenRenewal
		r.mu.Unlock()
		if renew {
			if err := r.writePodToken(ctx, rp, pod); err != nil {
				r.c.Opts.Log("pod %s: renewing its pod token: %v", rp.key, err)
			}
		}
		if !start {
			continue
		}
		if err := r.startPod(ctx, rp, pod); err != nil {
			// As the kubelet does with a missing Secret volume: the pod
			// waits (ContainerCreating) and the mount is retried.
			if msg := err.Error(); msg != rp.lastErr {
				r.c.Opts.Log("pod %s: not started yet, as a kubelet would wait: %v", rp.key, err)
				rp.lastErr = msg
			}
			continue
		}
		go r.watchTrainer(ctx, rp)
	}
}

// startPod starts the pod's sidecar, then its trainer.
func (r *PodRunner) startPod(ctx context.Context, rp *runningPod, pod *corev1.Pod) error {
	dir := filepath.Join(r.c.Dir, "pods", pod.Namespace, pod.Name+"-"+string(pod.UID)[:8])
	tokenDir, artifacts := filepath.Join(dir, "token"), r.ArtifactDir(pod)
	for _, d := range []string{tokenDir, artifacts} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	secretName := tokenSecretOf(pod)
	if secretName == "" {
		return fmt.Errorf("no token Secret volume in the injected pod")
	}
	var secret corev1.Secret
	if err := r.c.Client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: secretName}, &secret); err != nil {
		return fmt.Errorf("token Secret %s: %w", secretName, err)
	}
	for k, v := range secret.Data {
		if err := os.WriteFile(filepath.Join(tokenDir, k), v, 0o600); err != nil {
			return err
		}
	}
	rp.podTokenFile = filepath.Join(dir, "pod-token")
	if err := r.writePodToken(ctx, rp, pod); err != nil {
		return err
	}
	var env []string
	for k, v := range testenv.SidecarEnv(pod) {
		switch k {
		case names.EnvTokenFile:
			v = filepath.Join(tokenDir, filepath.Base(v))
		case names.EnvCAFile:
			v = filepath.Join(tokenDir, filepath.Base(v))
		case names.EnvPodTokenFile:
			v = rp.podTokenFile
		case names.EnvArtifactDir:
			v = artifacts
		case names.EnvServerURL:
			// On the cluster network the injected URL (the Service's DNS
			// name) is dialed as is, from the kwok pods' namespace; without
			// it, the binding server's loopback forwarder is the Service.
			if r.c.Network == nil && r.c.hostBindingURL != "" {
				v = r.c.hostBindingURL
			}
		}
		env = append(env, k+"="+v)
	}
	env = append(env, r.SidecarEnv...)
	plan := r.Plan(pod)
	env = append(env, plan.SidecarEnv...)
	logDir := filepath.Dir(dir)
	runs := 0
	startSidecar := func() (*Process, error) {
		runs++
		name := filepath.Base(dir) + "-sidecar"
		if runs > 1 {
			name += fmt.Sprintf("-restart-%d", runs-1)
		}
		if hp := r.c.hostPods(); hp != nil {
			bin, args := hp.command(r.sidecarBin)
			return startProcess(logDir, name, bin, args, env)
		}
		return startProcess(logDir, name, r.sidecarBin, nil, env)
	}
	sidecar, err := startSidecar()
	if err != nil {
		return err
	}
	trainer, err := startProcess(logDir, filepath.Base(dir)+"-trainer", r.trainerBin, r.trainerArgs(pod, plan, artifacts), nil)
	if err != nil {
		_ = sidecar.Stop(time.Second)
		return err
	}
	r.mu.Lock()
	rp.sidecar, rp.trainer, rp.sidecarStart = sidecar, trainer, startSidecar
	r.mu.Unlock()
	go r.keepSidecar(ctx, rp)
	return nil
}

// trainerArgs are the stand-in's flags for pod: its plan, its rank, and
// for a plan with FailPods the exit code this pod of its rank gets.
func (r *PodRunner) trainerArgs(pod *corev1.Pod, plan TrainerPlan, artifacts string) []string {
	rank, _ := trainjob.Rank(pod)
	key := fmt.Sprintf("%s/%s/%d", pod.Namespace, pod.Labels[trainjob.JobSetNameLabel], rank)
	r.mu.Lock()
	r.started[key]++
	n := r.started[key]
	r.mu.Unlock()
	if plan.FailPods > 0 && n > plan.FailPods {
		plan.ExitCode, plan.CorruptFirstCheckpoint = 0, false
	}
	return append(plan.Args(artifacts), fmt.Sprintf("--rank=%d", rank))
}

// watchTrainer finishes the pod when its trainer exits by itself.
func (r *PodRunner) watchTrainer(ctx context.Context, rp *runningPod) {
	<-rp.trainer.Done()
	r.mu.Lock()
	if rp.finishing {
		r.mu.Unlock()
		return // terminate() owns the pod now
	}
	rp.finishing = true
	r.mu.Unlock()
	code := exitCode(rp.trainer)
	// The kubelet first reports the trainer's end (the pod is still Running
	// while its sidecar stops), then SIGTERMs the sidecar, then the pod ends.
	_ = r.updateStatus(ctx, rp.key, func(pod *corev1.Pod) { setTerminated(pod, false, code) })
	sidecarCode := r.stopSidecar(rp, gracePeriod(ctx, r.c.Client, rp.key))
	_ = r.updateStatus(ctx, rp.key, func(pod *corev1.Pod) {
		setTerminated(pod, true, sidecarCode)
		pod.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			pod.Status.Phase = corev1.PodFailed
		}
		setReady(pod, false)
	})
	r.markFinished(rp)
}

// terminate handles a deleted pod: SIGTERM the trainer, then the sidecar
// (within the grace period), record their ends, and remove the pod.
func (r *PodRunner) terminate(ctx context.Context, rp *runningPod, pod *corev1.Pod) {
	grace := 30 * time.Second
	if pod.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	deadline := time.Now().Add(grace)
	r.mu.Lock()
	trainer := rp.trainer
	r.mu.Unlock()
	if trainer != nil {
		_ = trainer.Signal(syscall.SIGTERM)
		select {
		case <-trainer.Done():
		case <-time.After(time.Until(deadline)):
			_ = trainer.Signal(syscall.SIGKILL)
			<-trainer.Done()
		}
		code := exitCode(trainer)
		_ = r.updateStatus(ctx, rp.key, func(p *corev1.Pod) { setTerminated(p, false, code) })
		code = r.stopSidecar(rp, time.Until(deadline))
		_ = r.updateStatus(ctx, rp.key, func(p *corev1.Pod) {
			setTerminated(p, true, code)
			p.Status.Phase = corev1.PodFailed
			setReady(p, false)
		})
	}
	err := r.c.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: rp.key.Namespace, Name: rp.key.Name, UID: pod.UID}},
		client.GracePeriodSeconds(0), client.Preconditions{UID: ptr.To(pod.UID)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		r.c.Opts.Log("deleting pod %s: %v", rp.key, err)
	}
	r.markFinished(rp)
}

// markFinished records that the pod is done with; sync leaves it alone.
func (r *PodRunner) markFinished(rp *runningPod) {
	r.mu.Lock()
	rp.finished = true
	r.mu.Unlock()
}

// stopSidecar sends SIGTERM (and SIGCONT, should a test have paused it) and
// waits up to grace before SIGKILL; it returns the sidecar's exit code.
func (r *PodRunner) stopSidecar(rp *runningPod, grace time.Duration) int32 {
	r.mu.Lock()
	s := rp.sidecar
	r.mu.Unlock()
	if s == nil {
		return 0
	}
	_ = s.Signal(syscall.SIGTERM)
	_ = s.Signal(syscall.SIGCONT)
	select {
	case <-s.Done():
	case <-time.After(max(grace, 0)):
		_ = s.Signal(syscall.SIGKILL)
		<-s.Done()
	}
	return exitCode(s)
}

// updateStatus writes the pod's status as a kubelet's status manager does:
// a conflict is retried at once, any other failure (the apiserver away)
// again and again until it is written, the pod is gone, or 5 minutes pass.
func (r *PodRunner) updateStatus(ctx context.Context, key types.NamespacedName, mutate func(*corev1.Pod)) error {
	deadline := time.Now().Add(5 * time.Minute)
	var err error
	for time.Now().Before(deadline) {
		var pod corev1.Pod
		if err = r.c.Client.Get(ctx, key, &pod); err == nil {
			mutate(&pod)
			if err = r.c.Client.Status().Update(ctx, &pod); err == nil || apierrors.IsConflict(err) {
				if err == nil {
					return nil
				}
				continue
			}
		}
		if apierrors.IsNotFound(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("pod %s: status not written in 5m: %w", key, err)
}

func gracePeriod(ctx context.Context, c client.Client, key types.NamespacedName) time.Duration {
	var pod corev1.Pod
	if err := c.Get(ctx, key, &pod); err == nil && pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// setTerminated marks the trainer containers (sidecar=false) or the injected
// sidecar (sidecar=true) terminated with code.
func setTerminated(pod *corev1.Pod, sidecar bool, code int32) {
	now := metav1.Now()
	state := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason(code), FinishedAt: now}}
	statuses := pod.Status.ContainerStatuses
	if sidecar {
		statuses = pod.Status.InitContainerStatuses
	}
	for i := range statuses {
		if statuses[i].State.Terminated != nil {
			continue
		}
		if sidecar && statuses[i].Name != trainjob.SidecarContainer {
			continue // appended last, or completed where the runtime declared it
		}
		statuses[i].State = state
		statuses[i].Ready = false
		statuses[i].Started = ptr.To(false)
	}
}

func setReady(pod *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodReady || pod.Status.Conditions[i].Type == corev1.ContainersReady {
			pod.Status.Conditions[i].Status = status
		}
	}
}

func reason(code int32) string {
	if code == 0 {
		return "Completed"
	}
	return "Error"
}

func exitCode(p *Process) int32 {
	_, err := p.Exited()
	if err == nil {
		return 0
	}
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		if c := ee.ExitCode(); c >= 0 {
			return int32(c)
		}
		// Killed by a signal: 128 + signal, as a container runtime reports.
		if ws, ok := err.(interface{ Sys() any }); ok {
			if st, ok := ws.Sys().(syscall.WaitStatus); ok && st.Signaled() {
				return 128 + int32(st.Signal())
			}
		}
	}
	return 1
}

// writePodToken mints what the kubelet projects into the sidecar's
// tether-pod-token volume (a token of the pod's ServiceAccount, audience
// names.PodTokenAudience, bound to the pod) and replaces the file with it
// in one rename, as the kubelet's atomic writer does.
func (r *PodRunner) writePodToken(ctx context.Context, rp *runningPod, pod *corev1.Pod) error {
	token, err := testenv.PodToken(ctx, r.c.Clientset, pod)
	if err != nil {
		return err
	}
	tmp := rp.podTokenFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(token), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, rp.podTokenFile); err != nil {
		return err
	}
	rp.podTokenAt = time.Now()
	return nil
}

// tokenSecretOf is the Secret of the pod's Tether token volume.
func tokenSecretOf(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && strings.HasSuffix(v.Secret.SecretName, "-tether-token") {
			return v.Secret.SecretName
		}
	}
	return ""
}
