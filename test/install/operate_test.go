package install

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/test/framework/localcluster"
)

// upgradeVersion is the control plane's other build the upgrade rolls to.
const upgradeVersion = "v0.1.1-upgrade"

// TestHelmUpgradeWhileTraining: a platform team upgrades Tether while a
// bound job trains: the CRD step the chart's README asks for (`kubectl
// apply -f charts/tether/crds/`), then `helm upgrade --reuse-values` to
// another build of the control plane (its binary linked at another
// version, imported into the nodes under the team's registry: a new image
// tag and digest) with a changed setting (logLevel). The Deployment rolls
// one replica at a time (maxSurge 1, maxUnavailable 0: never fewer than 2
// ready, never more than 3), no dry-run admission of a labeled TrainJob,
// an unlabeled TrainJob or an unlabeled pod fails during the roll, the
// job's session moves to a new replica, the job, still training when the
// roll ends, succeeds with every file in the store as the trainer wrote
// it, and no file a replica took and verified was sent again (the access
// logs of every replica, followed while they ran).
func TestHelmUpgradeWhileTraining(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestHelmUpgradeWhileTraining: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	in := cluster.Installed
	newRef, err := in.BuildControlPlane(ctx, upgradeVersion)
	if err != nil {
		t.Fatal(err)
	}
	oldPods, err := in.ControlPlanePods(ctx)
	if err != nil || len(oldPods) != 2 {
		t.Fatalf("before the upgrade: %d control-plane pods (%v), want 2", len(oldPods), err)
	}
	oldImageIDs := map[string]bool{}
	for _, p := range oldPods {
		oldImageIDs[imageID(p)] = true
	}
	logs := followReplicaLogs(t)
	defer logs.close()
	// Long enough to train through the roll (about a minute here).
	job := startRunningJobWith(t, "through-upgrade", localcluster.TrainerPlan{Steps: 70, CheckpointEvery: 10, StepInterval: time.Second})
	var before string
	eventually(t, 30*time.Second, "the job's session replica in its binding", func() error {
		var err error
		if before, _, err = sessionReplica(ctx, job.ns, job.name); err == nil && before == "" {
			err = fmt.Errorf("no session replica yet")
		}
		return err
	})

	probe := startAdmissionProbe(t, "upgrade-admissions")
	time.Sleep(time.Second)
	if _, err := in.ApplyCRDs(ctx); err != nil {
		probe.finish()
		t.Fatal(err)
	}
	upgradeStart := time.Now()
	_, tag, _ := strings.Cut(newRef, ":")
	if _, err := in.Upgrade(ctx, "image.tag="+tag, "logLevel=debug"); err != nil {
		probe.finish()
		t.Fatal(err)
	}
	helmTook := time.Since(upgradeStart)
	if in.ControlPlaneImage != newRef {
		t.Errorf("after the upgrade the install names %s, want %s", in.ControlPlaneImage, newRef)
	}

	// The roll, as the Deployment's pods show it.
	minReady, maxLive := 1<<30, 0
	sessions := []string{before}
	eventually(t, 4*time.Minute, "every replica on the new build, Ready, the old ones gone", func() error {
		pods, err := in.AllControlPlanePods(ctx)
		if err != nil {
			return err
		}
		ready, live, old, newReady := localcluster.ServingReplicas(pods), 0, 0, 0
		for _, p := range pods {
			isNew := containerImage(p) == newRef
			if !isNew {
				old++
			}
			if p.DeletionTimestamp != nil {
				continue
			}
			live++
			if isNew && localcluster.PodReady(p) {
				newReady++
			}
		}
		minReady, maxLive = min(minReady, ready), max(maxLive, live)
		if s, _, err := sessionReplica(ctx, job.ns, job.name); err == nil && s != "" && s != sessions[len(sessions)-1] {
			sessions = append(sessions, s)
		}
		if old > 0 || newReady != 2 {
			return fmt.Errorf("%d pods of the old build left, %d of the new Ready", old, newReady)
		}
		return nil
	})
	rolled := time.Since(upgradeStart)
	attempts, failed, errs := probe.finish()
	logf("upgrade: helm upgrade %.1fs; every replica on %s and Ready %.1fs after its start; Ready replicas during the roll >= %d, live pods <= %d; %d dry-run admissions during it, %d failed",
		helmTook.Seconds(), upgradeVersion, rolled.Seconds(), minReady, maxLive, attempts, failed)
	if failed > 0 {
		t.Errorf("%d of %d admissions failed during the upgrade: %v", failed, attempts, errs)
	}
	if attempts < 30 {
		t.Errorf("only %d admissions tried during the upgrade: the probe did not overlap the roll", attempts)
	}
	if minReady < 2 {
		t.Errorf("%d Ready replicas at one point of the roll: the chart's strategy (maxUnavailable 0) keeps 2", minReady)
	}
	if maxLive > 3 {
		t.Errorf("%d replicas at once during the roll: the chart's strategy (maxSurge 1) allows 3", maxLive)
	}
	p := &corev1.Pod{}
	if err := cluster.Client.Get(ctx, crclient.ObjectKeyFromObject(job.pod), p); err != nil {
		t.Fatal(err)
	}
	if err := running(p, "node"); err != nil {
		t.Errorf("the trainer no longer ran when the roll ended (%v): the job did not train through the upgrade; give it more steps", err)
	}

	// The new replicas: the new build, the changed setting.
	newPods, err := in.ControlPlanePods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range newPods {
		if oldImageIDs[imageID(p)] {
			t.Errorf("replica %s runs image %s, the old build's", p.Name, imageID(p))
		}
		if args := containerArgs(p); !slices.Contains(args, "--zap-log-level=debug") {
			t.Errorf("replica %s's args %v lack --zap-log-level=debug (the upgrade's logLevel)", p.Name, args)
		}
	}
	var after string
	eventually(t, 60*time.Second, "the job's session on a replica of the new build", func() error {
		s, _, err := sessionReplica(ctx, job.ns, job.name)
		if err != nil {
			return err
		}
		for _, p := range newPods {
			if p.Name == s {
				after = s
				return nil
			}
		}
		return fmt.Errorf("session on %q", s)
	})
	if sessions[len(sessions)-1] != after {
		sessions = append(sessions, after)
	}
	logf("upgrade: the job's session moved %d times: %v", len(sessions)-1, sessions)

	wrote := checkSucceededAndStored(t, in, job.ns, job.name, job.jobID, job.pod, 180*time.Second)
	byReplica := checkNothingResent(t, logs, job.jobID, wrote)
	logf("upgrade: %d files verified, each version uploaded once; good uploads by replica %v", len(wrote), byReplica)
}

// TestDrainNodeOfSessionReplica: `kubectl drain` of the node that holds a
// control-plane replica and the job's session, with the job's pod on the
// other node (the drained node cordoned while it was placed): the drain
// evicts through the PodDisruptionBudget, so one replica stays Ready
// throughout; the session moves to a replica on the other node; the job
// succeeds with every file in the store as the trainer wrote it, none
// sent again. Whatever else of Tether's ran on the node (the in-cluster
// store) is evicted with it and comes back on the other node.
func TestDrainNodeOfSessionReplica(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestDrainNodeOfSessionReplica: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	in := cluster.Installed
	nodes := cluster.RealNodes()
	drained, other := nodes[0].Name, nodes[1].Name
	if _, err := cluster.Kubectl(ctx, "cordon", drained); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cluster.Kubectl(context.Background(), "uncordon", drained); err != nil {
			t.Error(err)
		}
	})
	logs := followReplicaLogs(t)
	defer logs.close()
	job := startRunningJobWith(t, "through-drain", localcluster.TrainerPlan{Steps: 60, CheckpointEvery: 10, StepInterval: time.Second})
	if job.pod.Spec.NodeName != other {
		t.Fatalf("the job's pod is on %s, want %s (%s was cordoned)", job.pod.Spec.NodeName, other, drained)
	}
	if _, err := cluster.Kubectl(ctx, "uncordon", drained); err != nil {
		t.Fatal(err)
	}

	// The session on the drained node's replica: the Service's endpoints
	// chose one of two; if it was the other node's, that replica is
	// deleted (as `kubectl delete pod` would) and the sidecar reconnects
	// to the one Ready replica left.
	var holder string
	for try := 0; ; try++ {
		var lease string
		eventually(t, 60*time.Second, "the job's session replica in its binding, Running", func() error {
			var err error
			holder, lease, err = sessionReplica(ctx, job.ns, job.name)
			if err == nil && holder == "" {
				err = fmt.Errorf("no session replica yet")
			}
			if err == nil && !replicaRunning(ctx, holder) {
				err = fmt.Errorf("session replica %s not running", holder)
			}
			return err
		})
		if nodeOf(ctx, holder) == drained {
			break
		}
		if try == 3 {
			t.Fatalf("the session stayed off %s's replica after %d replica deletions (on %s)", drained, try, holder)
		}
		logf("drain: the session is on %s (node %s); deleting it so the session moves to %s's replica", holder, nodeOf(ctx, holder), drained)
		if err := cluster.Client.Delete(ctx, &corev1.Pod{ObjectMeta: replicaMeta(holder)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "the session off the deleted replica", func() error {
			_, l, err := sessionReplica(ctx, job.ns, job.name)
			if err == nil && (l == lease || l == "") {
				err = fmt.Errorf("still %q", l)
			}
			return err
		})
	}

	// The drain, watched: Ready replicas never below the PDB's one.
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		low := 1 << 30
		for {
			if pods, err := in.AllControlPlanePods(ctx); err == nil {
				low = min(low, localcluster.ServingReplicas(pods))
			}
			select {
			case <-stop:
				done <- low
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	drainStart := time.Now()
	out, err := cluster.Kubectl(ctx, "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
	drainTook := time.Since(drainStart)
	if err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	var moved string
	eventually(t, 90*time.Second, "the session on a replica on "+other, func() error {
		s, _, err := sessionReplica(ctx, job.ns, job.name)
		if err == nil && nodeOf(ctx, s) != other {
			err = fmt.Errorf("session on %q (node %q)", s, nodeOf(ctx, s))
		}
		moved = s
		return err
	})
	sessionMoved := time.Since(drainStart)
	eventually(t, 3*time.Minute, "both replicas Ready again, on "+other, func() error {
		pods, err := in.ControlPlanePods(ctx)
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods {
			if p.Spec.NodeName == drained {
				return fmt.Errorf("replica %s still on the drained node", p.Name)
			}
			if localcluster.PodReady(p) {
				ready++
			}
		}
		if ready != 2 {
			return fmt.Errorf("%d Ready", ready)
		}
		return nil
	})
	close(stop)
	low := <-done
	logf("drain: kubectl drain %s took %.1fs (%s); the session moved from %s to %s %.1fs after the drain began; Ready replicas during it >= %d",
		drained, drainTook.Seconds(), strings.Join(strings.Fields(lastLine(out)), " "), holder, moved, sessionMoved.Seconds(), low)
	if low < 1 {
		t.Errorf("no Ready control-plane replica at one point of the drain: the PodDisruptionBudget (minAvailable 1) should hold one")
	}
	wrote := checkSucceededAndStored(t, in, job.ns, job.name, job.jobID, job.pod, 240*time.Second)
	byReplica := checkNothingResent(t, logs, job.jobID, wrote)
	logf("drain: %d files verified, each version uploaded once; good uploads by replica %v", len(wrote), byReplica)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func replicaMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: localcluster.ControlPlaneNamespace, Name: name}
}

// nodeOf is the node of control-plane pod name ("" if none).
func nodeOf(ctx context.Context, name string) string {
	p := &corev1.Pod{}
	if name == "" || cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: name}, p) != nil {
		return ""
	}
	return p.Spec.NodeName
}

// replicaRunning says whether control-plane pod name runs and is not
// being deleted.
func replicaRunning(ctx context.Context, name string) bool {
	p := &corev1.Pod{}
	if cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: localcluster.ControlPlaneNamespace, Name: name}, p) != nil {
		return false
	}
	return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
}

func controlPlane(p corev1.Pod) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == controlPlaneContainer {
			return &p.Spec.Containers[i]
		}
	}
	return &corev1.Container{}
}

func containerImage(p corev1.Pod) string  { return controlPlane(p).Image }
func containerArgs(p corev1.Pod) []string { return controlPlane(p).Args }

// imageID is the image (by digest) the control-plane container runs.
func imageID(p corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == controlPlaneContainer {
			return s.ImageID
		}
	}
	return ""
}
