package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	"github.com/minio/minio-go/v7"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/soakcheck"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// controlPlaneArgs are the e2e suite's: fast status writes and grace, so
// faults resolve within a soak's minutes.
var controlPlaneArgs = []string{"--status-interval=2s", "--artifact-grace=20s", "--missed-heartbeats=3", "--token-overlap=30s"}

var sidecarEnv = []string{"TETHER_SYNC_INTERVAL=1s", "TETHER_SETTLE_TIME=1s"}

// settings are the soak's knobs (make soak SEED= DURATION= JOBS=).
type settings struct {
	seed     uint64
	duration time.Duration
	jobs     int
	// realNodes adds the cluster network's two real nodes (root): jobs
	// on them and the nemesis's node kill (REAL_NODES=1; make soak's
	// default). soak-ci runs without: test/install holds the network then.
	realNodes bool
}

func settingsFromEnv(t *testing.T) settings {
	s := settings{seed: uint64(time.Now().UnixNano()), duration: 4 * time.Minute, jobs: 12}
	if v := os.Getenv("SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SEED=%q: want an unsigned integer", v)
		}
		s.seed = n
	}
	if v := os.Getenv("DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			t.Fatalf("DURATION=%q: want a duration of at least 1m, e.g. 10m", v)
		}
		s.duration = d
	}
	switch v := os.Getenv("REAL_NODES"); v {
	case "", "0":
	case "1":
		s.realNodes = true
	default:
		t.Fatalf("REAL_NODES=%q: want 1 (jobs on the real nodes, and nodes killed) or 0", v)
	}
	if v := os.Getenv("JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			t.Fatalf("JOBS=%q: want 1 to 200", v)
		}
		s.jobs = n
	}
	return s
}

// TestSoak: a seeded run of many jobs of mixed shapes under faults singly
// and overlapping, healed at the end, then checked offline (soakcheck)
// against what the store holds and the trainers recorded. The seed and
// every fault are printed: SEED=<n> replays the same plan.
func TestSoak(t *testing.T) {
	if os.Getenv("TETHER_SOAK") != "1" {
		t.Skip("set TETHER_SOAK=1 (make soak): it starts a full local cluster and runs for DURATION")
	}
	s := settingsFromEnv(t)
	rng := rand.New(rand.NewPCG(s.seed, 0x7e7e))
	logf("soak: SEED=%d DURATION=%s JOBS=%d REAL_NODES=%v", s.seed, s.duration, s.jobs, s.realNodes)
	ctx := context.Background()
	start := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{Kueue: true, KeepDir: os.Getenv("TETHER_E2E_KEEP") == "1", Log: logf,
		RealNode: s.realNodes, FastNodeLoss: s.realNodes})
	if err != nil {
		t.Fatalf("starting the local cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the local cluster: %v", err)
		}
	})
	tether, err := c.StartTether(ctx, localcluster.TetherOptions{Replicas: 2, S3: true, Args: controlPlaneArgs})
	if err != nil {
		t.Fatalf("starting Tether: %v", err)
	}
	records := filepath.Join(c.Dir, "records")
	// Writable by the stand-in's uid in a real node's container, which
	// mounts it (hostPath) to record there.
	if err := os.MkdirAll(records, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(records, 0o777); err != nil {
		t.Fatal(err)
	}
	w := &workload{c: c, records: records, plans: map[string]localcluster.TrainerPlan{}, real: s.realNodes}
	runner := c.NewPodRunner()
	runner.SidecarEnv = sidecarEnv
	runner.Plan = w.planFor
	runner.Start(ctx)
	t.Cleanup(func() { _ = runner.Stop() })
	logf("soak: cluster and Tether up in %.1fs", time.Since(start).Seconds())

	jobs := w.plan(rng, s)
	n := &nemesis{t: t, tether: tether, c: c, runner: runner, rng: rand.New(rand.NewPCG(s.seed, 0xfa17)), start: time.Now(),
		done: map[string]int{}, inflight: map[string]bool{}, on: map[string]int{}, kinds: faultKinds}
	if s.realNodes {
		n.kinds = append(slices.Clone(faultKinds), faultKillNode)
	}
	runCtx, stopFaults := context.WithTimeout(ctx, s.duration)
	var wg sync.WaitGroup
	wg.Go(func() { n.run(runCtx) })
	w.create(runCtx, t, jobs)
	<-runCtx.Done()
	stopFaults()
	wg.Wait()
	n.heal(ctx)
	logf("soak: faults ended and healed at %s (%d faults: %s)", n.since(), len(n.log), n.counts())
	if m := n.missing(); len(m) > 0 {
		t.Errorf("fault kinds that never happened in %s: %s (a longer DURATION gives each its turn)", s.duration, strings.Join(m, ", "))
	}
	if n.overlaps() == 0 {
		t.Errorf("no two faults overlapped in %s", s.duration)
	}

	limit := healLimit(jobs)
	logf("soak: waiting up to %s for every job's final phase (the longest job's run, the control plane's artifact grace and missed heartbeats, Kueue's queue)", limit)
	ended := w.waitEnded(ctx, t, jobs, limit)

	in := w.collect(ctx, t, jobs, ended, tether, n)
	awaitPendingSettled(ctx, in, settleLimit)
	in.Leftovers = leftovers(ctx, c, tether, jobs, ended)
	report := soakcheck.Check(ctx, in)
	phases := map[tetherv1.WorkerBindingPhase]int{}
	files, bytes := 0, int64(0)
	for i, j := range in.Jobs {
		for _, vs := range j.Wrote {
			for _, v := range vs {
				files++
				bytes += v.Size
			}
		}
		if j.Binding == nil {
			logf("soak: %s (%s): no binding, TrainJob ended %v, running %v", j, jobs[i].kind, j.Ended, j.Running)
			continue
		}
		st := j.Binding.Status
		phases[st.Phase]++
		logf("soak: %s (%s): %s/%s at attempt %d: %s", j, jobs[i].kind, st.Phase, st.Reason, st.Attempt, st.Message)
	}
	logf("soak: the trainers recorded %d file versions, %.1f MiB", files, float64(bytes)/(1<<20))
	fmt.Printf("soak SEED=%d: %d jobs (bindings by phase %v), %d faults (%s), %d access records\n%s",
		s.seed, len(jobs), phases, len(n.log), n.counts(), len(in.Access), report)
	if !report.OK() {
		t.Errorf("violations (replay with SEED=%d DURATION=%s JOBS=%d):\n%s", s.seed, s.duration, s.jobs, report)
	}
	plantViolations(ctx, t, in, tether.S3)
}

// plantViolations proves the checker on this run's own store: one verified
// file altered behind Tether's back and another deleted must each be named.
func plantViolations(ctx context.Context, t *testing.T, in soakcheck.Input, store *localcluster.S3) {
	var keys []string
	for _, j := range in.Jobs {
		if j.Binding == nil || j.Binding.Status.Phase != tetherv1.PhaseSucceeded {
			continue
		}
		for _, v := range j.Wrote[0] {
			k := j.JobID + "/" + v.Path
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		if len(keys) >= 2 {
			keys = keys[:2]
			break
		}
	}
	if len(keys) < 2 {
		// Every job may end Failed when the faults land on all of them
		// (CI, with two other lanes on the machine, once saw it): the
		// files a verified node manifest of any job lists are checked too.
		keys = verifiedFiles(ctx, t, in, store)
	}
	if len(keys) < 2 {
		t.Errorf("no Succeeded job with two files, and no two files verified by any job's node, to plant violations in")
		return
	}
	garbage := []byte("altered behind Tether's back")
	if _, err := store.Admin.PutObject(ctx, store.Bucket, keys[0], bytes.NewReader(garbage), int64(len(garbage)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := store.Admin.RemoveObject(ctx, store.Bucket, keys[1], minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r := soakcheck.Check(ctx, in).String()
	for _, k := range keys {
		if !strings.Contains(r, k) {
			t.Errorf("a planted violation on %s is not named by the checker:\n%s", k, r)
		}
	}
	logf("soak: the checker names both planted violations (%s altered, %s deleted)", keys[0], keys[1])
}

// verifiedFiles is the first two files (their keys) listed by a node
// manifest a binding calls verified and still in the store, of any job.
func verifiedFiles(ctx context.Context, t *testing.T, in soakcheck.Input, store *localcluster.S3) []string {
	var keys []string
	for _, j := range in.Jobs {
		if !j.Labeled || j.Binding == nil {
			continue
		}
		for _, n := range j.Binding.Status.Nodes {
			if n.Artifacts == nil || !n.Artifacts.Verified {
				continue
			}
			rank := int(n.Rank)
			obj, err := store.Admin.GetObject(ctx, store.Bucket, upload.ManifestKey(j.JobID, rank), minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var m upload.Manifest
			err = json.NewDecoder(obj).Decode(&m)
			_ = obj.Close()
			if err != nil {
				continue // the checker names a verified manifest that is not one
			}
			for _, f := range m.Files {
				k := j.JobID + "/" + upload.NodePrefix(rank) + f.Path
				if _, err := store.Admin.StatObject(ctx, store.Bucket, k, minio.StatObjectOptions{}); err != nil || slices.Contains(keys, k) {
					continue
				}
				if keys = append(keys, k); len(keys) == 2 {
					return keys
				}
			}
		}
	}
	return keys
}

// job is one TrainJob the soak creates.
type job struct {
	ns, name string
	kind     string
	labeled  bool
	nodes    int
	runtime  string
	plan     localcluster.TrainerPlan
	at       time.Duration
	// cancel sends the cancel command once it runs.
	cancel bool
	// minAttempts is how many attempts its plan alone makes (a trainer
	// that fails once: 2); the nemesis may add more.
	minAttempts int
}

// workload creates the jobs and gives the pod runner their plans.
type workload struct {
	c       *localcluster.Cluster
	records string
	real    bool // jobs on the real nodes too
	mu      sync.Mutex
	plans   map[string]localcluster.TrainerPlan
	created []job
}

// The kinds of job the soak draws from; the first jobs take each once,
// in a seeded order, so even a short run has every kind.
const (
	kindPlain     = "single-node"
	kindUnlabeled = "unlabeled"
	kindFourNode  = "4-node"
	kindCancel    = "cancelled"
	kindFailOnce  = "fails once, replaced"
	kindLarge     = "large checkpoints"
	kindRealNode  = "on a real node"
	kindInPlace   = "fails once, restarted in place"
)

var jobKinds = []string{kindUnlabeled, kindFourNode, kindCancel, kindFailOnce, kindLarge, kindPlain}

// realNodeQueue is the soak namespaces' LocalQueue on the real nodes'
// ClusterQueue.
const realNodeQueue = "real-node-queue"

// realRecords is where a real node's trainer container mounts the
// records directory.
const realRecords = "/soak-records"

// plan draws the jobs: single- and 4-node, checkpoints of 256 KiB to 8 MiB
// and large ones of 64 to 256 MiB, many small files, a latest checkpoint
// rewritten in place of the one before (often while it uploads), trainers
// that fail once and are replaced, cancelled jobs, and unlabeled ones
// alongside.
func (w *workload) plan(rng *rand.Rand, s settings) []job {
	var jobs []job
	kinds := jobKinds
	if w.real {
		kinds = append(slices.Clone(jobKinds), kindRealNode, kindInPlace)
	}
	order := rng.Perm(len(kinds))
	for i := range s.jobs {
		j := job{ns: fmt.Sprintf("soak-%d", i), name: fmt.Sprintf("job-%d", i), labeled: true, nodes: 1, runtime: localcluster.RuntimeName}
		j.plan = localcluster.TrainerPlan{Steps: 6 + rng.IntN(10), CheckpointEvery: 2 + rng.IntN(3), StepInterval: time.Second,
			CheckpointBytes: (256 << 10) << rng.IntN(6), SmallFiles: []int{0, 0, 20, 60}[rng.IntN(4)], RewriteLatest: rng.IntN(3) == 0}
		j.kind = []string{kindUnlabeled, kindUnlabeled, kindFourNode, kindFourNode, kindCancel, kindFailOnce, kindLarge, kindPlain, kindPlain, kindPlain}[rng.IntN(10)]
		if w.real && rng.IntN(4) == 0 {
			j.kind = []string{kindRealNode, kindRealNode, kindInPlace}[rng.IntN(3)]
		}
		if i < len(order) {
			j.kind = kinds[order[i]]
		}
		switch j.kind {
		case kindUnlabeled:
			j.labeled = false
		case kindFourNode:
			j.nodes = 4
		case kindCancel:
			j.cancel = true
		case kindFailOnce:
			// Exits 3 halfway; restartPolicy Never: the Job replaces the
			// pod, which resumes from the same volume and succeeds.
			j.runtime = localcluster.RuntimeNever
			j.plan.ExitCode, j.plan.FailPods, j.plan.FailAfterSteps, j.plan.Resume = 3, 1, j.plan.Steps/2, true
			j.minAttempts = 2
		case kindLarge:
			j.plan.CheckpointBytes, j.plan.ModelBytes = (64<<20)<<rng.IntN(3), 1<<20
			j.plan.CheckpointEvery = max(j.plan.Steps/2, 2)
		case kindRealNode, kindInPlace:
			// Trainer's torch-distributed runtime as shipped, under a real
			// kubelet; long enough for a node kill to find it running.
			j.runtime = localcluster.TorchRuntime
			j.plan.Steps = 30 + rng.IntN(31)
			j.plan.Record = fmt.Sprintf("%s/%s.%s.0.rec", realRecords, j.ns, j.name)
			if j.kind == kindInPlace {
				// Exits 3 halfway once (the run count lives in its artifact
				// directory, which the container keeps): the shipped runtime's
				// restartPolicy OnFailure (JobSet's default) and the Job's
				// backoffLimit (6) have the kubelet restart it in the same
				// pod, and it resumes from its last checkpoint.
				j.plan.ExitCode, j.plan.FailRuns, j.plan.FailAfterSteps, j.plan.Resume = 3, 1, j.plan.Steps/2, true
				j.minAttempts = 2
			}
		}
		j.at = time.Duration(rng.Int64N(int64(s.duration * 6 / 10)))
		jobs = append(jobs, j)
	}
	return jobs
}

func (w *workload) planFor(pod *corev1.Pod) localcluster.TrainerPlan {
	w.mu.Lock()
	p, ok := w.plans[pod.Namespace+"/"+pod.Labels[trainjob.JobSetNameLabel]]
	w.mu.Unlock()
	if !ok {
		return localcluster.TrainerPlan{}
	}
	rank, _ := trainjob.Rank(pod)
	p.Record = filepath.Join(w.records, fmt.Sprintf("%s.%s.%d.rec", pod.Namespace, pod.Labels[trainjob.JobSetNameLabel], rank))
	return p
}

// create creates each job at its time (relative to now), and cancels those
// that ask for it once their binding runs.
func (w *workload) create(ctx context.Context, t *testing.T, jobs []job) {
	start := time.Now()
	order := append([]job(nil), jobs...)
	slicesSortByAt(order)
	for _, j := range order {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(start.Add(j.at))):
		}
		if err := w.createOne(context.Background(), j); err != nil {
			t.Errorf("creating %s/%s: %v", j.ns, j.name, err)
			continue
		}
		logf("soak: created %s/%s (%s: labeled %v, %d nodes, %d steps, checkpoints of %d KiB, latest rewritten %v, %d small files)",
			j.ns, j.name, j.kind, j.labeled, j.nodes, j.plan.Steps, j.plan.CheckpointBytes>>10, j.plan.RewriteLatest, j.plan.SmallFiles)
		if j.cancel {
			go w.cancelWhenRunning(j)
		}
	}
}

func slicesSortByAt(js []job) {
	for i := 1; i < len(js); i++ {
		for k := i; k > 0 && js[k].at < js[k-1].at; k-- {
			js[k], js[k-1] = js[k-1], js[k]
		}
	}
}

// createOne creates the job's namespace, queue and TrainJob, retrying
// through the nemesis's API server and etcd restarts.
func (w *workload) createOne(ctx context.Context, j job) error {
	if err := retry(ctx, 90*time.Second, func() error {
		return client.IgnoreAlreadyExists(w.c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: j.ns}}))
	}); err != nil {
		return err
	}
	queue := "user-queue"
	makeQueue := w.c.LocalQueue
	if j.kind == kindRealNode || j.kind == kindInPlace {
		queue, makeQueue = realNodeQueue, w.c.RealNodeQueue
	}
	if err := retry(ctx, 90*time.Second, func() error { return makeQueue(ctx, j.ns, queue) }); err != nil {
		return err
	}
	w.mu.Lock()
	w.plans[j.ns+"/"+j.name] = j.plan
	w.created = append(w.created, j)
	w.mu.Unlock()
	tw := testobj.MakeTrainJob(j.name, j.ns).Runtime(j.runtime).Queue(queue).NumNodes(int32(j.nodes))
	if j.kind == kindRealNode || j.kind == kindInPlace {
		tw = w.onRealNode(tw, j)
	}
	if j.labeled {
		tw = tw.Bound().Annotation(names.HeartbeatIntervalAnnotation, "1s")
	}
	return retry(ctx, 90*time.Second, func() error { return client.IgnoreAlreadyExists(w.c.Client.Create(ctx, tw.Obj())) })
}

// cancelWhenRunning annotates the binding with the cancel command once it
// is Running (a command sent before is for nobody).
func (w *workload) cancelWhenRunning(j job) {
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		wb := &tetherv1.WorkerBinding{}
		if err := w.c.Client.Get(ctx, client.ObjectKey{Namespace: j.ns, Name: j.name}, wb); err == nil && wb.Status.Phase == tetherv1.PhaseRunning {
			patch := client.MergeFrom(wb.DeepCopy())
			if wb.Annotations == nil {
				wb.Annotations = map[string]string{}
			}
			wb.Annotations[names.CommandAnnotation] = "cancel:soak"
			if err := w.c.Client.Patch(ctx, wb, patch); err == nil {
				logf("soak: sent cancel to %s/%s", j.ns, j.name)
				return
			}
		}
		time.Sleep(time.Second)
	}
}

// healLimit is how long the soak waits after the heal: the longest job's
// run, twice, plus the artifact grace and a minute for queueing behind
// the cluster queue's quota.
func healLimit(jobs []job) time.Duration {
	longest := time.Duration(0)
	for _, j := range jobs {
		longest = max(longest, time.Duration(j.plan.Steps)*j.plan.StepInterval)
	}
	return 2*longest + 20*time.Second + time.Duration(len(jobs))*10*time.Second + time.Minute
}

// waitEnded waits until every job's TrainJob ended and every labeled one's
// binding has a final phase, and returns which did.
func (w *workload) waitEnded(ctx context.Context, t *testing.T, jobs []job, limit time.Duration) map[string]bool {
	ended := map[string]bool{}
	start := time.Now()
	for {
		left := 0
		for _, j := range jobs {
			key := j.ns + "/" + j.name
			if ended[key] {
				continue
			}
			if w.final(ctx, j) {
				ended[key] = true
				logf("soak: %s final %s after the heal", key, time.Since(start).Round(time.Second))
				continue
			}
			left++
		}
		if left == 0 || time.Since(start) > limit {
			if left > 0 {
				t.Errorf("%d jobs without a final phase %s after the heal", left, limit)
			}
			return ended
		}
		time.Sleep(2 * time.Second)
	}
}

func (w *workload) final(ctx context.Context, j job) bool {
	tj := &trainer.TrainJob{}
	if err := w.c.Client.Get(ctx, client.ObjectKey{Namespace: j.ns, Name: j.name}, tj); err != nil {
		return false
	}
	done := meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) || meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed)
	if !j.labeled {
		return done || w.running(ctx, j)
	}
	wb := &tetherv1.WorkerBinding{}
	if err := w.c.Client.Get(ctx, client.ObjectKey{Namespace: j.ns, Name: j.name}, wb); err != nil {
		return false
	}
	return done && (wb.Status.Phase == tetherv1.PhaseSucceeded || wb.Status.Phase == tetherv1.PhaseFailed)
}

// running says every one of an unlabeled job's nodes has a Running pod
// (kwok runs them and nothing ends them).
func (w *workload) running(ctx context.Context, j job) bool {
	var pods corev1.PodList
	if err := w.c.Client.List(ctx, &pods, client.InNamespace(j.ns), client.MatchingLabels{trainjob.JobSetNameLabel: j.name}); err != nil {
		return false
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n >= j.nodes
}

// collect gathers what the checker reads: the records, the bindings, the
// access logs of every replica, the store itself.
func (w *workload) collect(ctx context.Context, t *testing.T, jobs []job, ended map[string]bool, tether *localcluster.Tether, n *nemesis) soakcheck.Input {
	in := soakcheck.Input{Store: s3Store{tether.S3}}
	for _, j := range jobs {
		sj := soakcheck.Job{Namespace: j.ns, Name: j.name, Labeled: j.labeled, Nodes: j.nodes, Ended: ended[j.ns+"/"+j.name] && j.labeled,
			MinAttempts: j.minAttempts, Wrote: map[int][]soakcheck.Version{}, Faults: n.faultsDuring(j)}
		if !j.labeled {
			tj := &trainer.TrainJob{}
			if err := w.c.Client.Get(ctx, client.ObjectKey{Namespace: j.ns, Name: j.name}, tj); err == nil {
				sj.Ended = meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobComplete) ||
					meta.IsStatusConditionTrue(tj.Status.Conditions, trainer.TrainJobFailed)
			}
			sj.Running = w.running(ctx, j)
		}
		for r := range j.nodes {
			f, err := os.Open(filepath.Join(w.records, fmt.Sprintf("%s.%s.%d.rec", j.ns, j.name, r)))
			if err != nil {
				continue // never ran (or unlabeled with nothing to say)
			}
			vs, err := soakcheck.ReadRecord(f)
			_ = f.Close()
			if err != nil {
				t.Errorf("%s/%s rank %d's record: %v", j.ns, j.name, r, err)
			}
			sj.Wrote[r] = vs
		}
		wb := &tetherv1.WorkerBinding{}
		if err := w.c.Client.Get(ctx, client.ObjectKey{Namespace: j.ns, Name: j.name}, wb); err == nil {
			sj.Binding, sj.JobID = wb, wb.Spec.JobID
		}
		in.Jobs = append(in.Jobs, sj)
	}
	logs, _ := filepath.Glob(filepath.Join(w.c.Dir, "logs", "tether-*.log"))
	for _, l := range logs {
		f, err := os.Open(l)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := soakcheck.ParseAccessLog(f)
		_ = f.Close()
		if err != nil {
			t.Errorf("%s: %v", l, err)
		}
		in.Access = append(in.Access, recs...)
	}
	if len(logs) == 0 {
		t.Errorf("no replica logs under %s", filepath.Join(w.c.Dir, "logs"))
	}
	return in
}

// s3Store reads the store itself (its admin client), not through Tether.
type s3Store struct{ s *localcluster.S3 }

func (s s3Store) List(ctx context.Context, prefix string) ([]string, error) {
	m, err := s.s.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys, nil
}

// ListMultipartUploads lists the bucket's open multipart uploads under
// prefix: the checker reports any as left behind
// (soakcheck.MultipartLister).
func (s s3Store) ListMultipartUploads(ctx context.Context, prefix string) ([]objects.MultipartUpload, error) {
	var out []objects.MultipartUpload
	for u := range s.s.Admin.ListIncompleteUploads(ctx, s.s.Bucket, prefix, true) {
		if u.Err != nil {
			return nil, u.Err
		}
		out = append(out, objects.MultipartUpload{Key: u.Key, ID: u.UploadID, Initiated: u.Initiated})
	}
	return out, nil
}

func (s s3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	o, err := s.s.Admin.GetObject(ctx, s.s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := o.Stat(); err != nil {
		_ = o.Close()
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, upload.ErrNotFound
		}
		return nil, err
	}
	return o, nil
}

func retry(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func logf(format string, args ...any) {
	fmt.Printf("[soak %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// onRealNode makes tw's trainer the stand-in image on the real nodes, as
// e2e's real-node scenarios run it (a quarter CPU: Kueue assigns the real
// nodes' flavor only to a workload that requests a covered resource),
// recording into the records directory it mounts from the host.
func (w *workload) onRealNode(tw *testobj.TrainJobWrapper, j job) *testobj.TrainJobWrapper {
	return tw.ResourcesPerNode(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}).
		Image(w.c.RealNodes()[0].Image("tether-trainer-standin")).
		Command("/trainer-standin").
		Args(j.plan.Args(jobconfig.DefaultArtifactPath)...).
		NodePatch(trainer.PodSpecPatch{
			Volumes: []corev1.Volume{{Name: "soak-records", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: w.records, Type: ptr.To(corev1.HostPathDirectory)}}}},
			Containers: []trainer.ContainerPatch{{Name: "node", VolumeMounts: []corev1.VolumeMount{{Name: "soak-records", MountPath: realRecords}}}},
		})
}

// settleLimit is how long after the heal an ended job's pending objects may
// stay: the elected replica drops them once the store answers, retried
// every 5 s (promotionRetry), and a replica that started during a store
// outage first probes the store again (every 1 to 10 s) and waits up to 5 s
// for it (s3store.ProbeWait). CI's soak-ci once read the store 4 s after
// the heal, while a job that ended in the last store outage still had its
// pending objects.
const settleLimit = 30 * time.Second

// awaitPendingSettled waits, at most limit, until no ended job has pending
// objects in the store; what is left then is the checker's to report.
func awaitPendingSettled(ctx context.Context, in soakcheck.Input, limit time.Duration) {
	start := time.Now()
	for {
		left := 0
		for _, j := range in.Jobs {
			if !j.Ended {
				continue
			}
			keys, err := in.Store.List(ctx, j.JobID+"/"+upload.PendingDir)
			if err == nil {
				left += len(keys)
			}
		}
		if left == 0 {
			logf("soak: no ended job's pending objects left %s after the heal's check began", time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Since(start) >= limit {
			logf("soak: %d pending objects of ended jobs still in the store after %s", left, limit)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
