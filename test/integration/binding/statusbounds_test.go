package binding

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// The largest status a binding can get: every one of 256 nodes (the most a
// binding binds) with its longest names and a verdict naming ten missing
// keys of the longest length the store accepts (1008 bytes) and a 20 KB
// error, the job's own upload error as long, recorded through the same
// lifecycle calls the binding server makes and written through the real API
// server. etcd takes at most 1.5 MiB a request: a status over it would lose
// the verdict it carries.
func TestWorstCaseStatusOf256NodesIsAccepted(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, nil)
	long := strings.Repeat
	var size int
	eventually(t, 20*time.Second, func() error {
		wb := j.binding(t)
		st := &wb.Status
		lifecycle.SetNodeCount(st, binding.MaxBoundNodes)
		now := metav1.NewTime(time.Now())
		for r := range int32(binding.MaxBoundNodes) {
			n := lifecycle.Node(st, r)
			if n == nil {
				return fmt.Errorf("no node %d", r)
			}
			pod := fmt.Sprintf("%s-%d", long("p", 240), r)
			n.PodName, n.PodUID, n.NodeName, n.SessionReplica = pod, "0f7a9b1d-3f6b-4b7a-8c21-5e0f7a9b1d34", long("n", 253), long("s", 253)
			n.RegisteredTime, n.LastHeartbeatTime, n.LastSeq, n.UploadedBytes, n.Restarts = &now, &now, 1<<40, 1<<50, 1<<20
			n.LastExit = &tetherv1.TrainerExit{Rank: r, PodName: pod, ExitCode: 137, Reason: "OOMKilled", FinishedAt: now, Attempt: 1 << 20}
			missing := make([]string, 10)
			for i := range missing {
				missing[i] = fmt.Sprintf("%d/%s", i, long("k", 1006))
			}
			// A verdict is recorded only for the node's current pod, with the manifest's digest.
			lifecycle.ArtifactsRecorded(st, r, n.PodUID, tetherv1.NodeArtifacts{Manifest: fmt.Sprintf("%s/nodes/%d/manifest.json", wb.Spec.JobID, r),
				ManifestSHA256: long("f", 64), Files: 1 << 30, Bytes: 1 << 50, Missing: missing, MissingCount: 1 << 30, LastError: long("e", 20_000)})
			lifecycle.UploadReported(st, r, n.PodUID, 1<<50, long("u", 20_000))
		}
		st.TrainerExitCode, st.TrainerExits = ptr.To[int32](137), 1<<20
		b, _ := json.Marshal(wb)
		size = len(b)
		return env.Client.Status().Update(ctx, wb)
	})
	wb := j.binding(t)
	if len(wb.Status.Nodes) != binding.MaxBoundNodes || wb.Status.Nodes[255].Artifacts == nil || len(wb.Status.Nodes[255].Artifacts.Missing) != 10 {
		t.Fatalf("stored status lacks the nodes' verdicts: %d nodes", len(wb.Status.Nodes))
	}
	t.Logf("worst-case binding of %d nodes: %d bytes of JSON", binding.MaxBoundNodes, size)
}
