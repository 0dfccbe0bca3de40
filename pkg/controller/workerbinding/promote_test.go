package workerbinding

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// fakePending records promotions and drops; fail makes the next
// promotions fail, dropFail the next drops.
type fakePending struct {
	promoted  []string
	manifests [][]pending.VerifiedManifest
	fail      error
	dropped   []string
	dropFail  error
}

func (f *fakePending) Promote(_ context.Context, jobID string, manifests []pending.VerifiedManifest) (int, error) {
	f.manifests = append(f.manifests, manifests)
	if f.fail != nil {
		return 0, f.fail
	}
	f.promoted = append(f.promoted, jobID)
	return 1, nil
}

func (f *fakePending) DropPending(_ context.Context, jobID string) (int, error) {
	if f.dropFail != nil {
		return 0, f.dropFail
	}
	f.dropped = append(f.dropped, jobID)
	return 0, nil
}

// A binding whose every artifact is verified says Succeeded only after its
// latest versions were promoted over their final keys: an orchestrator that
// reads the final keys on Succeeded must get what the manifest lists.
func TestSucceededOnlyAfterPromotion(t *testing.T) {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
	wb.Spec.JobID = "job-1"
	wb.Spec.Settings = lifecycle.RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
	lifecycle.Initial(&wb.Status)
	store := &fakePending{fail: errors.New("S3 COPY: 503 SlowDown")}
	r := &Reconciler{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second,
		Live: jobSetReader{nodes: 1}, Pending: store}
	register(&wb.Status, at(1))
	manifest(0, true)(&wb.Status, at(20))
	pods := []corev1.Pod{*pod(0, "a").Exited(0, at(19)).Obj()}

	requeue := r.decideRequeue(context.Background(), trainJob(complete(21)), wb, pods, at(22))
	if wb.Status.Phase != tetherv1.PhaseFinishing || wb.Status.Reason != tetherv1.ReasonPromotingArtifacts {
		t.Fatalf("with the promotion failing: %s/%s, want Finishing/PromotingArtifacts", wb.Status.Phase, wb.Status.Reason)
	}
	if !strings.Contains(wb.Status.Message, "503 SlowDown") {
		t.Errorf("message %q does not say why the binding is not Succeeded yet", wb.Status.Message)
	}
	if requeue == 0 || requeue > promotionRetry {
		t.Errorf("requeue %s, want a retry within %s", requeue, promotionRetry)
	}

	store.fail = nil
	r.decideRequeue(context.Background(), trainJob(complete(21)), wb, pods, at(27))
	if wb.Status.Phase != tetherv1.PhaseSucceeded || wb.Status.Reason != tetherv1.ReasonTrainerSucceeded {
		t.Fatalf("after the promotion: %s/%s (%s), want Succeeded/TrainerSucceeded", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
	}
	if len(store.promoted) != 1 || store.promoted[0] != "job-1" {
		t.Errorf("promoted %v, want job-1 once", store.promoted)
	}
}

// A verified file overwritten before promotion (the store says it no
// longer holds the listed version) takes its node's verdict back: the
// binding does not say Succeeded over bytes the manifest does not list.
func TestPromotionOfAChangedArtifactTakesTheVerdictBack(t *testing.T) {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
	wb.Spec.JobID = "job-1"
	wb.Spec.Settings = lifecycle.RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
	lifecycle.Initial(&wb.Status)
	fake := &fakePending{fail: &pending.NotAsListedError{Rank: 0, Path: "model.bin", Why: "the key holds 3 bytes with MD5 x"}}
	r := &Reconciler{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second,
		Live: jobSetReader{nodes: 1}, Pending: fake}
	register(&wb.Status, at(1))
	manifest(0, true)(&wb.Status, at(20))
	wb.Status.Nodes[0].Artifacts.ManifestSHA256 = strings.Repeat("ab", 32)
	pods := []corev1.Pod{*pod(0, "a").Exited(0, at(19)).Obj()}

	r.decideRequeue(context.Background(), trainJob(complete(21)), wb, pods, at(22))
	if got := fake.manifests; len(got) != 1 || len(got[0]) != 1 || got[0][0] != (pending.VerifiedManifest{Rank: 0, SHA256: strings.Repeat("ab", 32)}) {
		t.Fatalf("Promote was given %+v, want node 0's recorded digest", got)
	}
	if wb.Status.Phase != tetherv1.PhaseFinishing || wb.Status.Reason != tetherv1.ReasonAwaitingArtifacts {
		t.Fatalf("%s/%s (%s), want Finishing/AwaitingArtifacts", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
	}
	if a := wb.Status.Nodes[0].Artifacts; a.Verified || len(a.Missing) != 1 || a.Missing[0] != "model.bin" {
		t.Errorf("node 0's artifacts %+v, want unverified naming model.bin", a)
	}
	r.decideRequeue(context.Background(), trainJob(complete(21)), wb, pods, at(52))
	if wb.Status.Phase != tetherv1.PhaseFailed || wb.Status.Reason != tetherv1.ReasonArtifactsIncomplete || !strings.Contains(wb.Status.Message, "model.bin") {
		t.Errorf("after the grace: %s/%s (%s), want Failed/ArtifactsIncomplete naming model.bin", wb.Status.Phase, wb.Status.Reason, wb.Status.Message)
	}
}

// fakeManifests answers StoredManifest from a map of rank to result.
type fakeManifests map[int]verify.ManifestResult

func (f fakeManifests) StoredManifest(_ context.Context, _ string, rank int) (verify.ManifestResult, bool, error) {
	res, ok := f[rank]
	return res, ok, nil
}

// A job whose manifest was stored but whose verdict never reached the
// binding (the apiserver away when it ended) is not failed ArtifactsIncomplete
// at the end of the grace: the controller reads the stored manifest's
// verdict first.
func TestStoredManifestVerdictBeforeArtifactsIncomplete(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stored     fakeManifests
		wantPhase  tetherv1.WorkerBindingPhase
		wantReason string
	}{
		{"stored and verified", fakeManifests{0: {Key: "job-1/manifest.json", PodUID: "a", Verified: true, Files: 3, Bytes: 30}},
			tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded},
		{"stored, an entry missing", fakeManifests{0: {Key: "job-1/manifest.json", PodUID: "a", Files: 3, Missing: []string{"model.bin"}, MissingCount: 1, Err: "1 entry missing"}},
			tetherv1.PhaseFailed, tetherv1.ReasonArtifactsIncomplete},
		{"not stored", fakeManifests{}, tetherv1.PhaseFailed, tetherv1.ReasonArtifactsIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
			wb.Spec.JobID = "job-1"
			wb.Spec.Settings = lifecycle.RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
			lifecycle.Initial(&wb.Status)
			r := &Reconciler{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second,
				Live: jobSetReader{nodes: 1}, Pending: &fakePending{}, Manifests: tc.stored}
			register(&wb.Status, at(1))
			pods := []corev1.Pod{*pod(0, "a").Exited(0, at(19)).Obj()}
			r.decideRequeue(context.Background(), trainJob(complete(21)), wb, pods, at(22))
			if wb.Status.Reason != tetherv1.ReasonAwaitingArtifacts {
				t.Fatalf("within the grace: %s/%s, want AwaitingArtifacts", wb.Status.Phase, wb.Status.Reason)
			}
			r.decideRequeue(context.Background(), trainJob(complete(21)), wb, pods, at(52))
			if wb.Status.Phase != tc.wantPhase || wb.Status.Reason != tc.wantReason {
				t.Errorf("after the grace: %s/%s (%s), want %s/%s", wb.Status.Phase, wb.Status.Reason, wb.Status.Message, tc.wantPhase, tc.wantReason)
			}
		})
	}
}
