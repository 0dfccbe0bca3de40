package artifactsettle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/upload"
)

var h0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// at is a time in a history: seconds after h0.
func at(s int) time.Time { return h0.Add(time.Duration(s) * time.Second) }

// fakePending records drops; dropFail makes the next drops fail.
type fakePending struct {
	dropped  []string
	dropFail error
}

func (f *fakePending) Promote(context.Context, string, []pending.VerifiedManifest) (int, error) {
	return 0, errors.New("not promoted here")
}

func (f *fakePending) DropPending(_ context.Context, jobID string) (int, error) {
	if f.dropFail != nil {
		return 0, f.dropFail
	}
	f.dropped = append(f.dropped, jobID)
	return 0, nil
}

// fakeManifests answers StoredManifest from a map of rank to result.
type fakeManifests map[int]verify.ManifestResult

func (f fakeManifests) StoredManifest(_ context.Context, _ string, rank int) (verify.ManifestResult, bool, error) {
	m, ok := f[rank]
	return m, ok, nil
}

// register is a sidecar's registration and first heartbeat.
func register(rank int, uid string) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, now time.Time) {
		lifecycle.PodSeen(st, lifecycle.Pod{Rank: int32(rank), Name: uid, UID: uid}, true, now)
		lifecycle.Heartbeat(st, int32(rank), uid, now, 1, nil)
	}
}

// manifest is the binding server's verdict on node rank's manifest.
func manifest(rank int, verified bool) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, _ time.Time) {
		a := tetherv1.NodeArtifacts{Manifest: upload.ManifestKey("job", rank), Verified: verified, Files: 2, Bytes: 10}
		uid := ""
		if n := lifecycle.Node(st, int32(rank)); n != nil {
			uid = n.PodUID
		}
		lifecycle.ArtifactsRecorded(st, int32(rank), uid, a)
	}
}

// A final binding's pending artifacts the store could not drop are tried
// again by a requeue of the binding's own, not left to whatever event comes
// next (a final binding may see none: a soak run under a store outage left
// a pending object behind).
func TestSettlePendingRetriesARefusedDrop(t *testing.T) {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
	wb.Spec.JobID = "job-1"
	store := &fakePending{dropFail: errors.New("S3 DELETE: 503 SlowDown")}
	r := &Reconciler{Pending: store}
	lifecycle.Initial(&wb.Status)
	if retry := r.settlePending(context.Background(), wb); retry != 0 || len(store.dropped) != 0 {
		t.Fatalf("a binding not final: retry %s, dropped %v; want nothing done", retry, store.dropped)
	}
	wb.Status.Phase = tetherv1.PhaseFailed
	if retry := r.settlePending(context.Background(), wb); retry != settleRetry {
		t.Fatalf("a refused drop: retry %s, want %s", retry, settleRetry)
	}
	store.dropFail = nil
	if retry := r.settlePending(context.Background(), wb); retry != 0 || len(store.dropped) != 1 {
		t.Fatalf("a drop the store took: retry %s, dropped %v; want no retry, one drop", retry, store.dropped)
	}
}

// A job that ended without succeeding (here: cancelled after its sidecar
// flushed a rewritten checkpoint) loses the versions that waited to be
// promoted; the binding then takes back each verdict whose manifest the
// store no longer matches, and keeps one it still matches.
func TestDroppedVersionsTakeTheVerdictBack(t *testing.T) {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
	wb.Spec.JobID = "job-1"
	wb.Spec.Settings = lifecycle.RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
	lifecycle.Initial(&wb.Status)
	register(0, "a")(&wb.Status, at(1))
	register(1, "b")(&wb.Status, at(1))
	manifest(0, true)(&wb.Status, at(20))
	manifest(1, true)(&wb.Status, at(20))
	r := &Reconciler{Manifests: fakeManifests{
		0: {Key: "job-1/manifest.json", PodUID: "a", Files: 3, Missing: []string{"checkpoints/latest.pt"}, MissingCount: 1, Err: "checkpoints/latest.pt: MD5 differs"},
		1: {Key: "job-1/nodes/1/manifest.json", PodUID: "b", Verified: true, Files: 2},
	}}
	if r.retractDroppedVerdicts(context.Background(), wb) {
		t.Fatal("a running binding's verdicts were taken back")
	}
	lifecycle.Cancelled(&wb.Status, "cancelled by the orchestrator (command c1)")
	if !r.retractDroppedVerdicts(context.Background(), wb) {
		t.Fatal("the cancelled binding kept calling node 0's manifest verified")
	}
	a0, a1 := wb.Status.Nodes[0].Artifacts, wb.Status.Nodes[1].Artifacts
	if a0.Verified || !strings.Contains(a0.LastError, "dropped, not promoted") || !strings.Contains(a0.LastError, "MD5 differs") || len(a0.Missing) != 1 {
		t.Errorf("node 0: %+v, want unverified, naming the dropped versions and the file", a0)
	}
	if !a1.Verified {
		t.Errorf("node 1, whose manifest the store still matches, lost its verdict: %+v", a1)
	}
	if r.retractDroppedVerdicts(context.Background(), wb) {
		t.Error("taken back twice")
	}

	// A binding that succeeded had its versions promoted: nothing to take back.
	ok := wb.DeepCopy()
	ok.Status.Phase, ok.Status.Reason = tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded
	r.Manifests = fakeManifests{1: {Key: "job-1/nodes/1/manifest.json", PodUID: "b", Files: 2, Missing: []string{"model.bin"}, MissingCount: 1}}
	if r.retractDroppedVerdicts(context.Background(), ok) || !ok.Status.Nodes[1].Artifacts.Verified {
		t.Error("a Succeeded binding's verdict was taken back")
	}
}
