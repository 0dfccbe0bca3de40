package binding

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// newTwoNodeJob binds a 2-node TrainJob and creates its two injected
// trainer pods; the jobs share the namespace, binding and token, one per
// node rank.
func newTwoNodeJob(t *testing.T) [2]*job {
	t.Helper()
	return newTwoNodeJobCounted(t, true)
}

// newTwoNodeJobCounted is newTwoNodeJob; count false leaves the binding's
// node count unrecorded (0), as it is until the controller has read the
// TrainJob's JobSet.
func newTwoNodeJobCounted(t *testing.T, count bool) [2]*job {
	t.Helper()
	ctx := context.Background()
	nsCounter++
	ns, name := fmt.Sprintf("bind-%d", nsCounter), "train"
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	mustCreate(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}})
	mustCreate(t, testobj.MakeTrainJob(name, ns).Bound().NumNodes(2).Annotation(names.HeartbeatIntervalAnnotation, "1s").Obj())
	secret := &corev1.Secret{}
	eventually(t, 15*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName(name)}, secret)
	})
	var out [2]*job
	for rank := range 2 {
		j := &job{ns: ns, name: name}
		j.pod = testobj.MakeTrainerPod(name, ns).Routed().CompletionIndex(strconv.Itoa(rank)).Name(fmt.Sprintf("%s-node-0-%d", name, rank)).Obj()
		mustCreate(t, j.pod)
		j.writeFiles(t, secret)
		out[rank] = j
	}
	if !count {
		return out
	}
	// No JobSet API here: record the count the controller reads from the
	// TrainJob's JobSet.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		wb := out[0].binding(t)
		wb.Status.NodeCount = 2
		return env.Client.Status().Update(ctx, wb)
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// nodeSyncer is rank's sidecar artifact sync (its keys under nodes/<rank>/).
func (j *job) nodeSyncer(t *testing.T, rank int) *artifacts.Syncer {
	t.Helper()
	cfg := j.clientConfig()
	up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: cfg.ServerURL, JobID: cfg.JobID, NodeRank: rank,
		TokenFile: j.tokenFile, PodTokenFile: j.podTokenFile, CAFile: j.caFile, PodUID: cfg.Pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := artifacts.NewScanner(artifacts.ScannerConfig{Dir: j.artifactDir, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.NewSyncer(artifacts.SyncerConfig{Scanner: sc, Uploader: up, JobID: cfg.JobID, PodUID: cfg.Pod.UID})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Rank 0's token and pod cannot vouch for rank 1: an empty manifest for
// rank 1, sent as rank 0's sidecar would send it, is refused, and the job
// whose rank 1 never uploaded its file does not succeed.
func TestNodeCannotVouchForAnotherNode(t *testing.T) {
	ctx := context.Background()
	nodes := newTwoNodeJob(t)
	for _, j := range nodes {
		runningClient(t, j.clientConfig())
	}
	waitRegistered(t, nodes)
	// Rank 0 flushes its files and manifest, verified.
	nodes[0].write(t, "model.bin", bytes.Repeat([]byte("rank 0 shard "), 1000))
	if rep, err := nodes[0].nodeSyncer(t, 0).Flush(ctx); err != nil {
		t.Fatalf("rank 0 flush: %v (%+v)", err, rep)
	}
	eventually(t, 15*time.Second, func() error {
		if n := nodeOf(nodes[0].binding(t), 0); n == nil || n.Artifacts == nil || !n.Artifacts.Verified {
			return fmt.Errorf("rank 0's manifest not verified yet")
		}
		return nil
	})

	// Rank 1's final flush fails (its shard is never uploaded); rank 0
	// sends an empty manifest for it, with the job's token and its own pod.
	c := nodes[0].tokenClient(t)
	jobID := nodes[0].clientConfig().JobID
	pod0, pod1 := string(nodes[0].pod.UID), string(nodes[1].pod.UID)
	for _, tc := range []struct {
		name, podUID string
	}{
		{"naming rank 0's pod", pod0},
		{"naming no pod", ""},
		{"naming rank 1's pod", pod1},
	} {
		m, _ := json.Marshal(upload.Manifest{Version: upload.ManifestVersion, JobID: jobID, PodUID: tc.podUID, Files: []upload.ManifestFile{}})
		code, msg := c.putAs(pod0, "nodes/1/"+upload.ManifestName, m)
		if code == http.StatusOK {
			t.Errorf("rank 0's empty manifest for rank 1 (%s): %d, want refused", tc.name, code)
		} else if !strings.Contains(msg, "pod") {
			t.Errorf("rank 0's empty manifest for rank 1 (%s): %d %s, want a refusal naming the pod", tc.name, code, msg)
		}
	}
	// Nor may rank 0 write rank 1's files.
	if code, msg := c.putAs(pod0, "nodes/1/shard.bin", []byte("planted")); code != http.StatusForbidden {
		t.Errorf("rank 0 writing rank 1's key: %d %s, want 403", code, msg)
	}

	for _, j := range nodes {
		finishTrainer(t, j, 0)
	}
	setTrainJobCondition(t, nodes[0], "Complete", "jobset completed")
	wb := nodes[0].waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonArtifactsIncomplete)
	if !strings.Contains(wb.Status.Message, "node 1") {
		t.Errorf("message %q does not name node 1", wb.Status.Message)
	}
}

func nodeOf(wb *tetherv1.WorkerBinding, rank int32) *tetherv1.NodeStatus {
	for i := range wb.Status.Nodes {
		if wb.Status.Nodes[i].Rank == rank {
			return &wb.Status.Nodes[i]
		}
	}
	return nil
}

// putAs PUTs body to the job's key rel as pod podUID's sidecar would (the
// token and the pod header).
func (c *tokenClient) putAs(podUID, rel string, body []byte) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPut, env.BindingURL+"/"+upload.Bucket+"/"+c.prefix+rel, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	c.sign(req)
	req.Header.Set(names.HeaderArtifactPodUID, podUID)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("PUT %s: %v", rel, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(msg)
}
