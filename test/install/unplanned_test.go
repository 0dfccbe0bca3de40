package install

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// TestNodeLossDuringTwoNodeJob: a whole real node is lost (its kubelet,
// containerd, kube-proxy and every container killed at once, its network
// gone) while a 2-node job runs one trainer pod on each node, after each
// node had files verified. The cluster does what it does with a lost node
// (Options.FastNodeLoss: marked unreachable after 20 s, its pods evicted
// 10 s later; Trainer's runtime as shipped leaves the replacement of the
// lost pod to its Job), and the binding follows it: the lost node is
// named (HeartbeatLost naming its pod, or, when the replacement registers
// first, the new attempt's Event naming the pod it replaced), a
// replacement pod is a new attempt, and
// the job ends in a final phase that is true of the store: Succeeded only
// with both nodes' manifests verified and every file the final trainers
// wrote in the store with their MD5s. No file in the store at the loss is
// gone at the end. The lost pod stays Terminating (no kubelet confirms its
// end) and its Job waits for it: the test then does what the Kubernetes
// docs ask of an operator whose node will not come back, the
// out-of-service taint.
//
// It runs last in the package (files run in name order): the lost node is
// not started again.
func TestNodeLossDuringTwoNodeJob(t *testing.T) {
	start := time.Now()
	defer func() { logf("TestNodeLossDuringTwoNodeJob: %.1fs", time.Since(start).Seconds()) }()
	ctx := context.Background()
	in := cluster.Installed
	const ns, name = "node-loss", "two-node"
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := cluster.RealNodeQueue(ctx, ns, "real-node-queue"); err != nil {
		t.Fatal(err)
	}
	plan := localcluster.TrainerPlan{Steps: 45, CheckpointEvery: 5, StepInterval: time.Second}
	// The runtime as shipped spreads nothing: the TrainJob asks for one
	// pod per node, preferred, not required (a replacement of the lost
	// node's pod has only the other node to go to).
	apart := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
		Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{trainjob.JobSetNameLabel: name}},
			TopologyKey:   corev1.LabelHostname,
		}}}}}
	tj := testobj.MakeTrainJob(name, ns).Runtime(localcluster.TorchRuntime).Bound().NumNodes(2).
		ResourcesPerNode(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}).
		Image(cluster.RealNodes()[0].Image("tether-trainer-standin")).Command("/trainer-standin").
		Args(plan.Args(jobconfig.DefaultArtifactPath)...).Queue("real-node-queue").
		NodePatch(trainer.PodSpecPatch{Affinity: apart}).Obj()
	if err := cluster.Client.Create(ctx, tj); err != nil {
		t.Fatalf("creating the labeled 2-node TrainJob: %v", err)
	}
	jobID := tj.Annotations[names.JobIDAnnotation]
	if jobID == "" {
		t.Fatalf("admitted without %s", names.JobIDAnnotation)
	}

	// One trainer pod on each real node, both heartbeating, and files of
	// both verified.
	pods := map[int32]*corev1.Pod{}
	eventually(t, 120*time.Second, "one trainer pod running on each real node", func() error {
		var list corev1.PodList
		if err := cluster.Client.List(ctx, &list, crclient.InNamespace(ns), crclient.MatchingLabels{trainjob.JobSetNameLabel: name}); err != nil {
			return err
		}
		nodes := map[string]bool{}
		for i, p := range list.Items {
			if err := running(&p, "node"); err != nil || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s: %v", p.Name, err)
			}
			pods[rankOf(&p)] = &list.Items[i]
			nodes[p.Spec.NodeName] = true
		}
		if len(pods) != 2 || len(nodes) != 2 {
			return fmt.Errorf("%d pods on %d nodes", len(pods), len(nodes))
		}
		return nil
	})
	jobDir := filepath.Join(in.StoreDir, localcluster.StoreBucket, jobID)
	waitBinding(t, ns, name, 90*time.Second, "both nodes heartbeating, and files of both stored", func(wb *tetherv1.WorkerBinding) error {
		if len(wb.Status.Nodes) != 2 {
			return fmt.Errorf("%d node entries", len(wb.Status.Nodes))
		}
		for _, n := range wb.Status.Nodes {
			if n.LastHeartbeatTime == nil {
				return fmt.Errorf("node %d not heartbeating", n.Rank)
			}
		}
		if n := countCheckpoints(storeFiles(t, jobDir)); n[0] == 0 || n[1] == 0 {
			return fmt.Errorf("checkpoints stored by rank: %v", n)
		}
		return nil
	})
	// The node of rank 1's pod, unless every control-plane replica is
	// there (the chart's spread is preferred, not required): then rank 0's,
	// so that a replica lives to see the loss.
	lostRank := int32(1)
	if replicas, err := in.ControlPlanePods(ctx); err == nil {
		on := 0
		for _, p := range replicas {
			if p.Spec.NodeName == pods[1].Spec.NodeName {
				on++
			}
		}
		if on == len(replicas) {
			lostRank = 0
		}
	}
	victimPod := pods[lostRank]
	victim := cluster.RealNodeNamed(victimPod.Spec.NodeName)
	atLoss := storeFiles(t, jobDir)
	before := &tetherv1.WorkerBinding{}
	if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: ns, Name: name}, before); err != nil {
		t.Fatal(err)
	}
	if err := victim.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	logf("node loss: %s killed with rank %d's pod %s on it (attempt %d; %d files in the store)", victim.Name, lostRank, victimPod.Name, before.Status.Attempt, len(atLoss))

	// What follows, as the binding shows it.
	var lostNamed, replaced, outOfService time.Duration
	var final *tetherv1.WorkerBinding
	var seen []string
	lostMark := fmt.Sprintf("node %d (pod %s", lostRank, victimPod.Name)
	eventually(t, 6*time.Minute, "the job's binding in a final phase after the node loss", func() error {
		wb := &tetherv1.WorkerBinding{}
		if err := cluster.Client.Get(ctx, crclient.ObjectKey{Namespace: ns, Name: name}, wb); err != nil {
			return err
		}
		state := fmt.Sprintf("%s/%s attempt %d", wb.Status.Phase, wb.Status.Reason, wb.Status.Attempt)
		if len(seen) == 0 || seen[len(seen)-1] != state {
			seen = append(seen, state)
			logf("node loss: +%.1fs binding %s: %s", time.Since(killed).Seconds(), state, wb.Status.Message)
		}
		if c := meta.FindStatusCondition(wb.Status.Conditions, tetherv1.ConditionHeartbeatLost); lostNamed == 0 && c != nil && c.Status == metav1.ConditionTrue &&
			strings.Contains(c.Message, lostMark) {
			lostNamed = time.Since(killed)
			logf("node loss: HeartbeatLost %.1fs after the loss: %s", lostNamed.Seconds(), c.Message)
		}
		if replaced == 0 && wb.Status.Attempt > before.Status.Attempt {
			replaced = time.Since(killed)
		}
		// What an operator does for a node that will not come back (the
		// Kubernetes docs' non-graceful node shutdown): taint it
		// out-of-service, so its pods, Terminating since the eviction with
		// no kubelet to confirm, are deleted and the Job can complete.
		if outOfService == 0 && (replaced > 0 || time.Since(killed) > 2*time.Minute) {
			if _, err := cluster.Kubectl(ctx, "taint", "nodes", victim.Name, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"); err != nil {
				return err
			}
			outOfService = time.Since(killed)
		}
		if wb.Status.Phase != tetherv1.PhaseSucceeded && wb.Status.Phase != tetherv1.PhaseFailed {
			return fmt.Errorf("%s: %s", state, wb.Status.Message)
		}
		final = wb
		return nil
	})
	if lostNamed == 0 {
		// The replacement may register before the silence is long enough
		// to be HeartbeatLost: then its attempt's Event names the pod it
		// took the node from (Events are written asynchronously).
		eventually(t, 30*time.Second, "a HeartbeatLost naming "+lostMark+") or an attempt's Event naming the pod lost with node "+victim.Name, func() error {
			var events corev1.EventList
			if err := cluster.Client.List(ctx, &events, crclient.InNamespace(ns)); err != nil {
				return err
			}
			var reasons []string
			for _, e := range events.Items {
				if e.Reason == tetherv1.ReasonAttemptStarted && strings.Contains(e.Message, "in place of pod "+victimPod.Name+" on node "+victim.Name) ||
					e.Reason == tetherv1.ReasonHeartbeatLost && strings.Contains(e.Message, lostMark) {
					logf("node loss: the lost node named by Event %s: %s", e.Reason, e.Message)
					return nil
				}
				reasons = append(reasons, e.Reason+": "+e.Message)
			}
			return fmt.Errorf("states seen %v; Events %v", seen, reasons)
		})
	}

	// Whichever way it ended: no file in the store at the loss is gone.
	atEnd := storeFiles(t, jobDir)
	for rel := range atLoss {
		if _, ok := atEnd[rel]; !ok {
			t.Errorf("%s was in the store at the node loss and is gone at the end", rel)
		}
	}
	switch final.Status.Phase {
	case tetherv1.PhaseSucceeded:
		if final.Status.Attempt <= before.Status.Attempt {
			t.Errorf("Succeeded at attempt %d: rank %d's pod was lost with its node, so a replacement (a new attempt) must have finished it", final.Status.Attempt, lostRank)
		}
		for _, n := range final.Status.Nodes {
			if n.Artifacts == nil || !n.Artifacts.Verified {
				t.Errorf("Succeeded with node %d's manifest not verified: %+v", n.Rank, n.Artifacts)
			}
		}
		// What the final trainers wrote (the lost pod's log went with its
		// node), from their closing lists, is what the store holds.
		var list corev1.PodList
		if err := cluster.Client.List(ctx, &list, crclient.InNamespace(ns), crclient.MatchingLabels{trainjob.JobSetNameLabel: name}); err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodSucceeded {
				continue
			}
			raw, err := cluster.Clientset.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "node"}).Do(ctx).Raw()
			if err != nil {
				t.Fatal(err)
			}
			prefix := upload.NodePrefix(int(rankOf(&p)))
			for rel, sum := range standinFiles(string(raw)) {
				checked++
				if atEnd[prefix+rel] != sum {
					t.Errorf("rank %d (pod %s): %s: the trainer wrote MD5 %s, the store holds %q", rankOf(&p), p.Name, prefix+rel, sum, atEnd[prefix+rel])
				}
			}
		}
		if checked == 0 {
			t.Errorf("Succeeded, but no succeeded trainer pod's file list to check the store against")
		}
	default:
		if final.Status.Reason == "" || final.Status.Message == "" {
			t.Errorf("Failed without a reason or message: %+v", final.Status)
		}
	}
	logf("node loss: HeartbeatLost %.1fs after the loss (0: none before the replacement), a new attempt %.1fs after, the node tainted out-of-service %.1fs after; the binding ended %s/%s at attempt %d (%s) %.1fs after; states: %v",
		lostNamed.Seconds(), replaced.Seconds(), outOfService.Seconds(), final.Status.Phase, final.Status.Reason, final.Status.Attempt, final.Status.Message,
		time.Since(killed).Seconds(), seen)
}

// rankOf is a trainer pod's rank: its Job completion index.
func rankOf(p *corev1.Pod) int32 {
	var r int32
	_, _ = fmt.Sscan(p.Labels["batch.kubernetes.io/job-completion-index"], &r)
	return r
}

// countCheckpoints counts stored checkpoint files by rank (rank 0's at the
// job's prefix, the others' under upload.NodePrefix).
func countCheckpoints(onDisk map[string]string) map[int]int {
	n := map[int]int{}
	for rel := range onDisk {
		r := 0
		if p := upload.NodePrefix(1); strings.HasPrefix(rel, p) {
			r, rel = 1, strings.TrimPrefix(rel, p)
		}
		if strings.HasPrefix(rel, "checkpoints/") {
			n[r]++
		}
	}
	return n
}
