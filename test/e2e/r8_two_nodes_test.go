package e2e

import (
	"fmt"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real nodes, scenario 8: a 2-node TrainJob on Trainer's torch-distributed
// runtime as shipped, one trainer pod on each real node (required pod
// anti-affinity on the hostname). Each pod's sidecar is given the Service's
// DNS name and registers its node through it; every node heartbeats; each
// node's sharded checkpoints are stored under its node's prefix with the
// MD5s its stand-in reports, each node's manifest is verified, and the
// binding succeeds.
func TestRealNode8TwoNodes(t *testing.T) {
	shared(t)
	needRealNode(t)
	if len(suite.c.RealNodes()) < 2 {
		t.Skip("needs two real nodes")
	}
	timed(t)
	ns := suite.realNodeNamespace(t, "real-two")
	const name = "real-two-nodes"
	plan := localcluster.TrainerPlan{Steps: 12, CheckpointEvery: 4, StepInterval: time.Second, Shards: true}
	apart := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{trainjob.JobSetNameLabel: name}},
		TopologyKey:   corev1.LabelHostname,
	}}}}
	tj := bound(realTrainJob(name, ns, plan)).NumNodes(2).NodePatch(trainer.PodSpecPatch{Affinity: apart}).Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]

	injected := suite.nodePods(t, ns, name, 2)
	pods := make([]*corev1.Pod, 2)
	for r := range injected {
		if got := injectedEnv(&injected[r], names.EnvServerURL); got != localcluster.ControlPlaneBindingURL {
			t.Fatalf("rank %d: sidecar's %s = %q, want the Service's DNS name %s", r, names.EnvServerURL, got, localcluster.ControlPlaneBindingURL)
		}
		pods[r] = suite.waitRunningOnRealNode(t, &injected[r])
	}
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		t.Fatalf("both trainer pods on %s, want one on each real node", pods[0].Spec.NodeName)
	}
	suite.waitBinding(t, ns, name, 60*time.Second, "both nodes registered and heartbeating", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.NodeCount != 2 || len(wb.Status.Nodes) != 2 {
			return fmt.Errorf("nodeCount %d, %d node entries", wb.Status.NodeCount, len(wb.Status.Nodes))
		}
		for _, n := range wb.Status.Nodes {
			p := pods[n.Rank]
			if n.LastHeartbeatTime == nil || n.PodUID != string(p.UID) || n.NodeName != p.Spec.NodeName {
				return fmt.Errorf("node %d: pod %s on %q, heartbeat %v; want pod %s on %s", n.Rank, n.PodName, n.NodeName, n.LastHeartbeatTime, p.Name, p.Spec.NodeName)
			}
		}
		return nil
	})
	wb := suite.waitBinding(t, ns, name, 120*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))

	// Each node's files, as its stand-in listed them, are stored under the
	// node's prefix with their MD5s, and its manifest is verified.
	stored := suite.stored(t, jobID)
	for r, p := range pods {
		p = suite.waitPodSucceeded(t, p)
		files := standinFiles(suite.podLog(t, p, "node", false))
		if len(files) == 0 {
			t.Fatalf("rank %d: no file list in the trainer's log", r)
		}
		prefix := upload.NodePrefix(r)
		for rel, sum := range files {
			if got := stored[prefix+rel]; got != sum {
				t.Errorf("rank %d (node %s): %s stored as %q, the trainer left %s", r, p.Spec.NodeName, prefix+rel, got, sum)
			}
		}
		na := wb.Status.Nodes[r].Artifacts
		if na == nil || !na.Verified || int(na.Files) != len(files) || na.Manifest != upload.ManifestKey(jobID, r) {
			t.Errorf("rank %d: manifest verdict %+v, want %s verified with %d files", r, na, upload.ManifestKey(jobID, r), len(files))
		}
		logf("real two nodes: rank %d on %s (pod IP %s): %d files stored and verified", r, p.Spec.NodeName, p.Status.PodIP, len(files))
	}
	if stored["model/final.safetensors"] == "" {
		t.Error("rank 0's final model is not stored at the job's prefix")
	}
}
