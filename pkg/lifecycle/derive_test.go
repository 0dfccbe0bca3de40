package lifecycle

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// The phase machine, driven as the control plane drives it: each row is a
// history of what the controller sees (trainer pods, the TrainJob's
// conditions) and what the binding server records (registrations,
// heartbeats, manifest verdicts), applied in order to one binding; the row's
// checks run on the status after the last step.

// Digests of manifests the store holds, in histories with required outputs.
var (
	shaCheckpoint = strings.Repeat("c", 64)
	shaFinal      = strings.Repeat("f", 64)
	shaNode1      = strings.Repeat("1", 64)
)

var h0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// at is a time in a history: seconds after h0.
func at(s int) time.Time { return h0.Add(time.Duration(s) * time.Second) }

// tpod is a trainer pod of job "tj", rank and uid given, injected, created at t.
func tpod(rank int, uid string, created int) *testobj.PodWrapper {
	return testobj.MakeTrainerPod("tj", "ns").CompletionIndex(fmt.Sprint(rank)).UID(uid).Created(at(created)).
		RestartPolicy(corev1.RestartPolicyOnFailure).Injected()
}

// step is one moment of a history.
type step struct {
	t int // seconds after h0
	// pods is the trainer pod list the controller sees (nil: no reconcile).
	pods []*testobj.PodWrapper
	// conds are the TrainJob's conditions at this step.
	conds []metav1.Condition
	// server is what binding servers record at this step.
	server func(st *tetherv1.WorkerBindingStatus, now time.Time)
	// stored are manifests the store holds from this step on: the paths
	// each lists (relative to its node's prefix), by its SHA-256.
	stored map[string][]string
}

// register is a sidecar's registration and first heartbeat.
func register(rank int, uid string) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return registerIn(0, rank, uid)
}

// registerIn registers a pod of JobSet restart attempt ra.
func registerIn(ra int32, rank int, uid string) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, now time.Time) {
		PodSeen(st, Pod{Rank: int32(rank), Name: uid, UID: uid, RestartAttempt: ra}, true, now)
		Heartbeat(st, int32(rank), uid, now, 1, nil)
	}
}

// registerAll registers pod uids[r] as node r, of JobSet restart attempt ra.
func registerAll(ra int32, uids ...string) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, now time.Time) {
		for r, uid := range uids {
			registerIn(ra, r, uid)(st, now)
		}
	}
}

func heartbeat(rank int, uid string, seq int64, step int64) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, now time.Time) {
		Heartbeat(st, int32(rank), uid, now, seq, &tetherv1.Progress{Step: &step})
	}
}

func manifest(rank int, verified bool) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, _ time.Time) {
		a := tetherv1.NodeArtifacts{Manifest: upload.ManifestKey("job", rank), Verified: verified, Files: 2, Bytes: 10}
		if !verified {
			a.Missing, a.MissingCount, a.LastError = []string{"ckpt/shard.pt"}, 1, "1 of 2 files missing or different"
		}
		uid := ""
		if n := Node(st, int32(rank)); n != nil {
			uid = n.PodUID
		}
		ArtifactsRecorded(st, int32(rank), uid, a)
	}
}

// verifiedManifest is node rank's manifest of digest sha, verified.
func verifiedManifest(rank int, sha string) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, _ time.Time) {
		a := tetherv1.NodeArtifacts{Manifest: upload.ManifestKey("job", rank), ManifestSHA256: sha, Verified: true, Files: 2, Bytes: 10}
		if n := Node(st, int32(rank)); n != nil {
			ArtifactsRecorded(st, int32(rank), n.PodUID, a)
		}
	}
}

// listedIn is what the store's manifests list for the ones wanted, as
// the controller reads them (relative to the job's prefix).
func listedIn(stored map[string][]string, wanted map[int32]string) *ListedPaths {
	lp := &ListedPaths{}
	for rank, sha := range wanted {
		paths, ok := stored[sha]
		if !ok {
			return &ListedPaths{Err: "no manifest " + sha + " stored"}
		}
		for _, p := range paths {
			lp.Paths = append(lp.Paths, upload.NodePrefix(int(rank))+p)
		}
	}
	return lp
}

func manifests(n int) func(*tetherv1.WorkerBindingStatus, time.Time) {
	return func(st *tetherv1.WorkerBindingStatus, now time.Time) {
		for r := range n {
			manifest(r, true)(st, now)
		}
	}
}

func cond(typ string, status metav1.ConditionStatus, t int, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(at(t)), Reason: typ, Message: msg}
}

var (
	admitted = []metav1.Condition{cond(trainjob.ConditionSuspended, metav1.ConditionFalse, 0, "")}
	complete = func(t int) []metav1.Condition {
		return append(admitted, cond(trainjob.ConditionComplete, metav1.ConditionTrue, t, "jobset completed"))
	}
	failed = func(t int) []metav1.Condition {
		return append(admitted, cond(trainjob.ConditionFailed, metav1.ConditionTrue, t, "jobset failed: BackoffLimitExceeded"))
	}
	suspended = []metav1.Condition{cond(trainjob.ConditionSuspended, metav1.ConditionTrue, 0, "")}
)

// want are a row's checks; zero values are not checked except Phase and Reason.
type want struct {
	phase            tetherv1.WorkerBindingPhase
	reason           string
	attempt          int32
	startedBy        string
	trainerExits     int32
	lastExitCode     *int32
	messageHas       []string
	heartbeatLostHas string
	nodeCount        int32
	events           []string // reasons of the Events the controller recorded, in order (checked when set)
	eventNoteHas     string   // a text some Event's note has (checked when set)
}

func code(c int32) *int32 { return &c }

func TestPhaseMachineHistories(t *testing.T) {
	cases := []struct {
		name  string
		nodes int    // the JobSet's trainer nodes (0: no JobSet)
		scope string // annotation tether.dev/nodes
		// require is annotation tether.dev/require, parsed.
		require []string
		steps   []step
		want    want
	}{{
		name: "one node: exit 0 alone is no verdict; Complete plus the verified manifest is",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 20, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: admitted, server: manifest(0, true)},
		},
		want: want{phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating, attempt: 1, startedBy: tetherv1.AttemptAdmission,
			trainerExits: 1, lastExitCode: code(0), nodeCount: 1},
	}, {
		name: "one node: happy path",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 20, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: admitted, server: manifest(0, true)},
			{t: 22, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: complete(21)},
		},
		want: want{phase: tetherv1.PhaseSucceeded, reason: tetherv1.ReasonTrainerSucceeded, attempt: 1, trainerExits: 1, lastExitCode: code(0),
			events: []string{tetherv1.ReasonHeartbeating, tetherv1.ReasonTrainerExited, tetherv1.ReasonTrainerSucceeded}},
	}, {
		name: "in place (OnFailure): the trainer fails, the kubelet restarts it, it succeeds",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).Exited(1, at(9))), conds: admitted, server: heartbeat(0, "a", 5, 100)},
			{t: 21, pods: ps(tpod(0, "a", 1).Running(1).LastExit(1, at(9))), conds: admitted, server: heartbeat(0, "a", 9, 40)},
			{t: 40, pods: ps(tpod(0, "a", 1).Exited(0, at(39)).LastExit(1, at(9))), conds: admitted, server: manifest(0, true)},
			{t: 42, pods: ps(tpod(0, "a", 1).Exited(0, at(39)).LastExit(1, at(9))), conds: complete(41)},
		},
		want: want{phase: tetherv1.PhaseSucceeded, attempt: 2, startedBy: tetherv1.AttemptTrainerRestarted, trainerExits: 2, lastExitCode: code(0),
			events: []string{tetherv1.ReasonHeartbeating, tetherv1.ReasonTrainerExited, tetherv1.ReasonAttemptStarted, tetherv1.ReasonTrainerExited, tetherv1.ReasonTrainerSucceeded}},
	}, {
		name: "in place: the binding stays live while the trainer is down, and progress may go backwards",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).Exited(1, at(9))), conds: admitted, server: heartbeat(0, "a", 5, 100)},
			{t: 21, pods: ps(tpod(0, "a", 1).Running(1).LastExit(1, at(9))), conds: admitted, server: heartbeat(0, "a", 9, 40)},
		},
		want: want{phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeating, attempt: 2, startedBy: tetherv1.AttemptTrainerRestarted,
			trainerExits: 1, lastExitCode: code(1)},
	}, {
		name: "in place: retries exhausted: the TrainJob fails and the verdict names the last exit and the history",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).Running(1).LastExit(1, at(9))), conds: admitted},
			{t: 30, pods: ps(tpod(0, "a", 1).Running(2).LastExit(2, at(29))), conds: admitted},
			{t: 50, pods: ps(tpod(0, "a", 1).Running(2).LastExit(2, at(29)).Exited(3, at(49))), conds: failed(51)},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonTrainerFailed, attempt: 3, trainerExits: 3, lastExitCode: code(3),
			messageHas: []string{"BackoffLimitExceeded", "exited with code 3", "3 trainer exits in 3 attempts"}},
	}, {
		name: "replacement pod (restartPolicy Never): a new pod of rank 0 starts attempt 2",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).RestartPolicy(corev1.RestartPolicyNever).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).RestartPolicy(corev1.RestartPolicyNever).Exited(1, at(9))), conds: admitted},
			{t: 12, pods: ps(tpod(0, "a", 1).RestartPolicy(corev1.RestartPolicyNever).Exited(1, at(9)),
				tpod(0, "b", 11).RestartPolicy(corev1.RestartPolicyNever).Running(0)), conds: admitted, server: register(0, "b")},
			{t: 30, pods: ps(tpod(0, "a", 1).RestartPolicy(corev1.RestartPolicyNever).Exited(1, at(9)),
				tpod(0, "b", 11).RestartPolicy(corev1.RestartPolicyNever).Exited(0, at(29))), conds: admitted, server: manifest(0, true)},
			{t: 32, pods: ps(tpod(0, "b", 11).RestartPolicy(corev1.RestartPolicyNever).Exited(0, at(29))), conds: complete(31)},
		},
		want: want{phase: tetherv1.PhaseSucceeded, attempt: 2, startedBy: tetherv1.AttemptPodReplaced, trainerExits: 2, lastExitCode: code(0)},
	}, {
		name:  "node lost: rank 1's pod never exits, its replacement is seen before it registers; the attempt's Event names the lost pod",
		nodes: 2,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).NodeName("n0").Running(0), tpod(1, "b", 1).NodeName("n1").Running(0)), conds: admitted,
				server: func(st *tetherv1.WorkerBindingStatus, now time.Time) {
					register(0, "a")(st, now)
					register(1, "b")(st, now)
				}},
			{t: 40, pods: ps(tpod(0, "a", 1).NodeName("n0").Running(0), tpod(1, "b", 1).NodeName("n1").Running(0).Deleting(at(35)),
				tpod(1, "c", 39).NodeName("n0").Running(0)), conds: admitted},
		},
		want: want{phase: tetherv1.PhaseRunning, attempt: 2, startedBy: tetherv1.AttemptPodReplaced,
			eventNoteHas: "attempt 2 started: PodReplaced (node 1), in place of pod b on node n1"},
	}, {
		name:  "JobSet restart (failurePolicy RestartJobSet): every pod recreated, attempt 2 for the whole job",
		nodes: 2,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a0", 1).Running(0), tpod(1, "a1", 1).Running(0)), conds: admitted, server: registerAll(0, "a0", "a1")},
			{t: 10, pods: ps(tpod(0, "a0", 1).Running(0), tpod(1, "a1", 1).Exited(1, at(9))), conds: admitted},
			{t: 15, pods: ps(tpod(0, "b0", 14).RestartAttempt(1).Running(0), tpod(1, "b1", 14).RestartAttempt(1).Running(0)), conds: admitted,
				server: registerAll(1, "b0", "b1")},
			{t: 40, pods: ps(tpod(0, "b0", 14).RestartAttempt(1).Exited(0, at(39)), tpod(1, "b1", 14).RestartAttempt(1).Exited(0, at(39))),
				conds: admitted, server: manifests(2)},
			{t: 42, pods: ps(), conds: complete(41)},
		},
		want: want{phase: tetherv1.PhaseSucceeded, attempt: 2, startedBy: tetherv1.AttemptJobSetRestart, trainerExits: 3, nodeCount: 2,
			messageHas: []string{"all 2 nodes"}},
	}, {
		name: "a JobSet recreated after its TTL (trainer#3737) does not reset a final binding",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).RestartPolicy(corev1.RestartPolicyNever).Exited(1, at(9))), conds: failed(11)},
			{t: 100, pods: ps(tpod(0, "z", 99).Running(0)), conds: admitted, server: register(0, "z")},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonTrainerFailed, attempt: 1, trainerExits: 1, lastExitCode: code(1)},
	}, {
		name: "Kueue re-admission: preempted, admitted again, attempt 2; the SIGTERM exit of the deleted pod is no verdict",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).Deleting(at(9)).Exited(143, at(10))), conds: suspended},
			{t: 20, pods: ps(tpod(0, "b", 19).Running(0)), conds: admitted, server: register(0, "b")},
		},
		want: want{phase: tetherv1.PhaseRunning, attempt: 2, startedBy: tetherv1.AttemptReadmission, trainerExits: 0},
	}, {
		name:  "four nodes: complete once every node's manifest is verified",
		nodes: 4,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "p0", 1).Running(0), tpod(1, "p1", 1).Running(0), tpod(2, "p2", 1).Running(0), tpod(3, "p3", 1).Running(0)),
				conds: admitted, server: registerAll(0, "p0", "p1", "p2", "p3")},
			{t: 30, pods: ps(), conds: complete(30), server: manifests(3)},
		},
		want: want{phase: tetherv1.PhaseFinishing, reason: tetherv1.ReasonAwaitingArtifacts, nodeCount: 4, messageHas: []string{"node(s) 3"}},
	}, {
		name:  "four nodes: the last manifest completes the binding",
		nodes: 4,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "p0", 1).Running(0), tpod(1, "p1", 1).Running(0), tpod(2, "p2", 1).Running(0), tpod(3, "p3", 1).Running(0)),
				conds: admitted, server: registerAll(0, "p0", "p1", "p2", "p3")},
			{t: 30, pods: ps(), conds: complete(30), server: manifests(3)},
			{t: 31, server: manifest(3, true)},       // the server: PromotingArtifacts
			{t: 32, pods: ps(), conds: complete(30)}, // the controller promotes, then Succeeded
		},
		want: want{phase: tetherv1.PhaseSucceeded, nodeCount: 4},
	}, {
		name:  "four nodes: the last manifest verified by the server is not Succeeded before the controller promoted it",
		nodes: 4,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "p0", 1).Running(0), tpod(1, "p1", 1).Running(0), tpod(2, "p2", 1).Running(0), tpod(3, "p3", 1).Running(0)),
				conds: admitted, server: registerAll(0, "p0", "p1", "p2", "p3")},
			{t: 30, pods: ps(), conds: complete(30), server: manifests(3)},
			{t: 31, server: manifest(3, true)},
		},
		want: want{phase: tetherv1.PhaseFinishing, reason: tetherv1.ReasonPromotingArtifacts, nodeCount: 4},
	}, {
		name:  "four nodes: a node without a verified manifest after the grace fails the binding, naming the node",
		nodes: 4,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "p0", 1).Running(0), tpod(1, "p1", 1).Running(0), tpod(2, "p2", 1).Running(0), tpod(3, "p3", 1).Running(0)),
				conds: admitted, server: registerAll(0, "p0", "p1", "p2", "p3")},
			{t: 30, pods: ps(), conds: complete(30), server: func(st *tetherv1.WorkerBindingStatus, now time.Time) {
				manifest(0, true)(st, now)
				manifest(1, true)(st, now)
				manifest(2, false)(st, now)
				manifest(3, true)(st, now)
			}},
			{t: 100, pods: ps(), conds: complete(30)},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonArtifactsIncomplete, nodeCount: 4,
			messageHas: []string{"node 2: nodes/2/ckpt/shard.pt is not stored as the manifest lists it"}},
	}, {
		name:  "four nodes: node 2 silent past the heartbeat budget is HeartbeatLost, named",
		nodes: 4,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "p0", 1).Running(0), tpod(1, "p1", 1).Running(0), tpod(2, "p2", 1).Running(0), tpod(3, "p3", 1).Running(0)),
				conds: admitted, server: registerAll(0, "p0", "p1", "p2", "p3")},
			{t: 50, server: func(st *tetherv1.WorkerBindingStatus, now time.Time) {
				for _, r := range []int{0, 1, 3} {
					heartbeat(r, fmt.Sprintf("p%d", r), 5, 10)(st, now)
				}
			}},
			{t: 60, pods: ps(tpod(0, "p0", 1).Running(0), tpod(1, "p1", 1).Running(0), tpod(2, "p2", 1).Running(0), tpod(3, "p3", 1).Running(0)),
				conds: admitted},
		},
		want: want{phase: tetherv1.PhaseRunning, reason: tetherv1.ReasonHeartbeatLost, nodeCount: 4,
			heartbeatLostHas: "node 2 (pod p2): no heartbeat recorded for 59s"},
	}, {
		name: "Kueue preemption: the deleted pod of the suspended job starts no attempt, however often it is seen",
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).Deleting(at(9)).Running(0)), conds: suspended},
			{t: 11, pods: ps(tpod(0, "a", 1).Deleting(at(9)).Exited(143, at(11))), conds: suspended},
			{t: 12, pods: ps(tpod(0, "a", 1).Deleting(at(9)).Exited(143, at(11))), conds: suspended},
			{t: 13, pods: ps(tpod(0, "a", 1).Exited(143, at(11))), conds: suspended},
		},
		want: want{phase: tetherv1.PhasePending, reason: tetherv1.ReasonPreempted, attempt: 1, trainerExits: 0},
	}, {
		name: "a TrainJob whose pods never had the sidecar ends NeverBound, not awaiting artifacts forever",
		steps: []step{
			{t: 1, pods: ps(testobj.MakeTrainerPod("tj", "ns").UID("u").Running(0)), conds: admitted},
			{t: 30, pods: ps(), conds: complete(29)},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonNeverBound, messageHas: []string{"Complete", "nothing was bound"}},
	}, {
		name:  "nodes=primary: node 0 alone is bound, the others' pods are not the binding's",
		nodes: 4, scope: jobconfig.NodesPrimary,
		steps: []step{
			{t: 1, pods: ps(tpod(0, "p0", 1).Running(0), tpod(1, "p1", 1).Exited(1, at(1))), conds: admitted, server: register(0, "p0")},
			{t: 30, pods: ps(tpod(0, "p0", 1).Exited(0, at(29))), conds: complete(30), server: manifest(0, true)},
		},
		want: want{phase: tetherv1.PhaseSucceeded, nodeCount: 1, trainerExits: 1, lastExitCode: code(0)},
	}, {
		name:    "required outputs: every glob matches a file of the final manifest: Succeeded",
		require: []string{"model/*.safetensors", "config.json"},
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 20, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: admitted, server: verifiedManifest(0, shaFinal),
				stored: map[string][]string{shaFinal: {"model/model-00001-of-00002.safetensors", "model/model-00002-of-00002.safetensors", "config.json"}}},
			{t: 22, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: complete(21)},
		},
		want: want{phase: tetherv1.PhaseSucceeded, reason: tetherv1.ReasonTrainerSucceeded, trainerExits: 1,
			events: []string{tetherv1.ReasonHeartbeating, tetherv1.ReasonTrainerExited, tetherv1.ReasonTrainerSucceeded}},
	}, {
		name:    "required outputs: a glob that matches nothing fails the job, naming it and the closest verified paths",
		require: []string{"model/*.safetensors", "config.json", "tokenizer.json"},
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 20, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: admitted, server: verifiedManifest(0, shaFinal),
				stored: map[string][]string{shaFinal: {"model/pytorch_model.bin", "configs/config.json", "tokenizer.json", "logs/train.log"}}},
			{t: 22, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: complete(21)},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonRequiredOutputsMissing, trainerExits: 1,
			messageHas: []string{`"model/*.safetensors" matched no verified file (closest verified: model/pytorch_model.bin`,
				`"config.json" matched no verified file (closest verified: configs/config.json`, "(4 files)", "tether.dev/require"},
			events: []string{tetherv1.ReasonHeartbeating, tetherv1.ReasonTrainerExited, tetherv1.ReasonRequiredOutputsMissing}},
	}, {
		name:    "required outputs: a checkpoint's manifest matched, the final manifest does not: Failed",
		require: []string{"model/*.safetensors"},
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: register(0, "a")},
			{t: 10, pods: ps(tpod(0, "a", 1).Running(0)), conds: admitted, server: verifiedManifest(0, shaCheckpoint),
				stored: map[string][]string{shaCheckpoint: {"model/model.safetensors", "ckpt/step-10.pt"}}},
			{t: 20, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: admitted, server: verifiedManifest(0, shaFinal),
				stored: map[string][]string{shaFinal: {"ckpt/step-20.pt"}}},
			{t: 22, pods: ps(tpod(0, "a", 1).Exited(0, at(19))), conds: complete(21)},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonRequiredOutputsMissing, trainerExits: 1,
			messageHas: []string{`"model/*.safetensors" matched no verified file (closest verified: ckpt/step-20.pt)`, "(1 files)"}},
	}, {
		name:    "required outputs: another node's files are matched under nodes/<rank>/",
		nodes:   2,
		require: []string{"model/*.safetensors", "nodes/1/shard-*.pt"},
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a0", 1).Running(0), tpod(1, "a1", 1).Running(0)), conds: admitted, server: registerAll(0, "a0", "a1")},
			{t: 20, pods: ps(tpod(0, "a0", 1).Exited(0, at(19)), tpod(1, "a1", 1).Exited(0, at(19))), conds: admitted,
				server: func(st *tetherv1.WorkerBindingStatus, now time.Time) {
					verifiedManifest(0, shaFinal)(st, now)
					verifiedManifest(1, shaNode1)(st, now)
				},
				stored: map[string][]string{shaFinal: {"model/model.safetensors"}, shaNode1: {"shard-1.pt"}}},
			{t: 22, pods: ps(), conds: complete(21)},
		},
		want: want{phase: tetherv1.PhaseSucceeded, reason: tetherv1.ReasonTrainerSucceeded, trainerExits: 2, nodeCount: 2},
	}, {
		name:    "required outputs: a rank-0 glob is not satisfied by another node's file",
		nodes:   2,
		require: []string{"shard-*.pt"},
		steps: []step{
			{t: 1, pods: ps(tpod(0, "a0", 1).Running(0), tpod(1, "a1", 1).Running(0)), conds: admitted, server: registerAll(0, "a0", "a1")},
			{t: 20, pods: ps(tpod(0, "a0", 1).Exited(0, at(19)), tpod(1, "a1", 1).Exited(0, at(19))), conds: admitted,
				server: func(st *tetherv1.WorkerBindingStatus, now time.Time) {
					verifiedManifest(0, shaFinal)(st, now)
					verifiedManifest(1, shaNode1)(st, now)
				},
				stored: map[string][]string{shaFinal: {"model/model.safetensors"}, shaNode1: {"shard-1.pt"}}},
			{t: 22, pods: ps(), conds: complete(21)},
		},
		want: want{phase: tetherv1.PhaseFailed, reason: tetherv1.ReasonRequiredOutputsMissing, trainerExits: 2, nodeCount: 2,
			messageHas: []string{`"shard-*.pt" matched no verified file (closest verified: nodes/1/shard-1.pt`}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns"}}
			wb.Spec.Settings = RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll})
			if tc.scope != "" {
				wb.Spec.Settings.Nodes = tc.scope
			}
			wb.Spec.Settings.Require = tc.require
			stored := map[string][]string{}
			Initial(&wb.Status)
			events := &eventLog{}
			p := Policy{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second}
			nodes := tc.nodes
			if nodes == 0 {
				nodes = 1
			}
			for _, s := range tc.steps {
				now := at(s.t)
				before := wb.Status.DeepCopy()
				maps.Copy(stored, s.stored)
				if s.server != nil {
					s.server(&wb.Status, now)
				}
				if s.pods != nil {
					pods := make([]corev1.Pod, len(s.pods))
					for i, p := range s.pods {
						pods[i] = *p.Obj()
					}
					o := Observation{Now: now, Conditions: s.conds, Pods: pods}
					if NeedsNodeCount(wb, pods) {
						o.NodeCount = nodes // the JobSet's count
					}
					out := Derive(wb, p, o)
					if out.Want.ListedPaths != nil {
						o.ListedPaths = listedIn(stored, out.Want.ListedPaths)
						out = Derive(wb, p, o)
					}
					wb.Status = out.Status
					if out.Want.Promote {
						ArtifactsPromoted(&wb.Status) // the store took the promotion
					}
					for _, e := range out.Events {
						events.add(e.Reason)
						events.notes = append(events.notes, e.Note)
					}
				}
				if Transitioned(before.Phase, before.Reason, &wb.Status) {
					events.add(wb.Status.Reason)
				}
			}
			checkStatus(t, &wb.Status, tc.want, events.reasons)
			if has := tc.want.eventNoteHas; has != "" && !strings.Contains(strings.Join(events.notes, "\n"), has) {
				t.Errorf("no Event note has %q: %q", has, events.notes)
			}
		})
	}
}

func checkStatus(t *testing.T, st *tetherv1.WorkerBindingStatus, w want, events []string) {
	t.Helper()
	if st.Phase != w.phase || (w.reason != "" && st.Reason != w.reason) {
		t.Errorf("phase %s/%s (%q), want %s/%s", st.Phase, st.Reason, st.Message, w.phase, w.reason)
	}
	if w.attempt != 0 && st.Attempt != w.attempt {
		t.Errorf("attempt %d (started by %s), want %d", st.Attempt, st.AttemptStartedBy, w.attempt)
	}
	if w.startedBy != "" && st.AttemptStartedBy != w.startedBy {
		t.Errorf("attempt started by %q, want %q", st.AttemptStartedBy, w.startedBy)
	}
	if st.TrainerExits != w.trainerExits {
		t.Errorf("trainerExits %d, want %d", st.TrainerExits, w.trainerExits)
	}
	if w.lastExitCode != nil && (st.LastTrainerExit == nil || st.LastTrainerExit.ExitCode != *w.lastExitCode) {
		t.Errorf("last trainer exit %+v, want code %d", st.LastTrainerExit, *w.lastExitCode)
	}
	for _, m := range w.messageHas {
		if !strings.Contains(st.Message, m) {
			t.Errorf("message %q does not contain %q", st.Message, m)
		}
	}
	if w.heartbeatLostHas != "" {
		if !IsHeartbeatLost(st) {
			t.Errorf("HeartbeatLost is not True")
		} else if c := findCondition(st, tetherv1.ConditionHeartbeatLost); !strings.Contains(c.Message, w.heartbeatLostHas) {
			t.Errorf("HeartbeatLost message %q does not contain %q", c.Message, w.heartbeatLostHas)
		}
	}
	if w.nodeCount != 0 && st.NodeCount != w.nodeCount {
		t.Errorf("nodeCount %d, want %d", st.NodeCount, w.nodeCount)
	}
	if w.events != nil && strings.Join(events, ",") != strings.Join(w.events, ",") {
		t.Errorf("events %v, want %v", events, w.events)
	}
}

func findCondition(st *tetherv1.WorkerBindingStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return &metav1.Condition{}
}

func ps(ws ...*testobj.PodWrapper) []*testobj.PodWrapper {
	if ws == nil {
		return []*testobj.PodWrapper{}
	}
	return ws
}

type eventLog struct{ reasons, notes []string }

func (e *eventLog) add(r string) { e.reasons = append(e.reasons, r) }
