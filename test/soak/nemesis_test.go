package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// A fault kind the nemesis draws from. Each one ends by itself.
const (
	faultKillReplica   = "SIGKILL of a replica"
	faultStopReplica   = "SIGSTOP of a replica past its Lease"
	faultStoreDown     = "the store answering 503"
	faultBlackhole     = "the binding network black-holed"
	faultAPIServer     = "kube-apiserver restart"
	faultEtcd          = "etcd restart"
	faultDeleteTrainer = "a trainer pod deleted"
	faultKillSidecar   = "a sidecar SIGKILLed"
	faultStoreStall    = "the store stalling mid-body"
	faultPreempt       = "Kueue preempting for a rival"
	// faultKillNode is drawn only with the real nodes (REAL_NODES=1).
	faultKillNode = "a real node killed"
)

var faultKinds = []string{faultKillReplica, faultStopReplica, faultStoreDown, faultBlackhole, faultAPIServer, faultEtcd, faultDeleteTrainer,
	faultKillSidecar, faultStoreStall, faultPreempt}

// rivalCPU is what a preempting rival asks for: half of cluster-queue's
// 12 CPUs, so Kueue evicts some of the soak's running jobs (priority 0)
// for it, never all of them.
const rivalCPU = "6"

// fault is one fault as it happened.
type fault struct {
	kind       string
	detail     string
	start, end time.Duration // since the nemesis started
}

func (f fault) String() string {
	return fmt.Sprintf("t=%s..%s %s (%s)", f.start.Round(time.Second), f.end.Round(time.Second), f.kind, f.detail)
}

// nemesis injects faults, singly and overlapping, from its own seeded
// source: a new one every 3 to 7 s while a kind has not happened yet, then every
// 6 to 14 s, each lasting 5 to 30 s. At most one
// replica is down or stopped at a time (the control plane runs two), and
// the API server and etcd are not restarted at once.
type nemesis struct {
	t      *testing.T
	c      *localcluster.Cluster
	tether *localcluster.Tether
	runner *localcluster.PodRunner
	rng    *rand.Rand
	start  time.Time

	// kinds are the fault kinds drawn: faultKinds, and faultKillNode with
	// the real nodes.
	kinds []string

	mu      sync.Mutex
	log     []fault
	replica bool // a replica is down or stopped
	control bool // the API server or etcd is down
	node    bool // a real node is down
	rivals  int  // preempting rivals created
	// done counts the faults of each kind that happened, inflight the
	// kinds being injected now; skipped is an owed kind whose last draw
	// found no target.
	done     map[string]int
	inflight map[string]bool
	skipped  string
	// on counts the overlapping faults of each switched kind (black hole,
	// store down, store stalling) that are on now (hold).
	on map[string]int
	wg sync.WaitGroup
}

// hold turns a switched fault on for hold: on with the first of
// overlapping faults of its kind, off after the last. One ending must not
// heal another that is still on (two overlapping black holes: the first
// one's end deleted the table the second then failed to delete, and the
// second's last seconds were no black hole at all).
func (n *nemesis) hold(kind string, set func(on bool) error, hold time.Duration) error {
	n.mu.Lock()
	n.on[kind]++
	first := n.on[kind] == 1
	n.mu.Unlock()
	var err error
	if first {
		err = set(true)
	}
	time.Sleep(hold)
	n.mu.Lock()
	n.on[kind]--
	last := n.on[kind] == 0
	n.mu.Unlock()
	if last {
		if offErr := set(false); err == nil {
			err = offErr
		}
	}
	return err
}

func (n *nemesis) since() time.Duration { return time.Since(n.start) }

func (n *nemesis) run(ctx context.Context) {
	// Every kind first, in a seeded order, then any. A kind skipped for
	// want of a target (no running pod with a sidecar yet, the replica slot
	// taken) is owed and is the next draw's: beside other work on 2 cores a
	// 4-minute run once ended with a kind whose round-robin turn came back
	// too late. While kinds are owed, faults come every 3 to 7 s, then every
	// 6 to 14 s.
	order := n.rng.Perm(len(n.kinds))
	next := 0 // where in order the search for an owed kind starts
	for {
		wait := n.rng.IntN(9)
		n.mu.Lock()
		owed := n.owedLocked()
		n.mu.Unlock()
		interval := time.Duration(6+wait) * time.Second
		if owed {
			interval = time.Duration(3+wait/2) * time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		kind := n.kinds[n.rng.IntN(len(n.kinds))]
		hold := time.Duration(5+n.rng.IntN(26)) * time.Second
		replica := n.rng.IntN(2)
		pick := n.rng.Uint64()
		n.mu.Lock()
		if k := n.skipped; k != "" && n.done[k] == 0 && !n.inflight[k] {
			kind = k
		} else {
			// Round-robin over the owed kinds: one with no target yet must
			// not keep the others from their turn.
			for step := range order {
				if k := n.kinds[order[(next+step)%len(order)]]; n.done[k] == 0 && !n.inflight[k] {
					kind, next = k, (next+step+1)%len(order)
					break
				}
			}
		}
		n.skipped = ""
		n.inflight[kind] = true
		n.mu.Unlock()
		n.wg.Go(func() {
			n.inject(kind, hold, replica, pick)
			n.mu.Lock()
			n.inflight[kind] = false
			if n.done[kind] == 0 {
				n.skipped = kind // no target this time: owed, drawn next
			}
			n.mu.Unlock()
		})
	}
}

// owedLocked says whether a kind has not happened yet (n.mu held).
func (n *nemesis) owedLocked() bool {
	for _, k := range n.kinds {
		if n.done[k] == 0 {
			return true
		}
	}
	return false
}

// missing are the fault kinds that never happened.
func (n *nemesis) missing() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, k := range n.kinds {
		if n.done[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// claim takes the replica or control slot; false: it is taken, skip.
func (n *nemesis) claim(slot *bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if *slot {
		return false
	}
	*slot = true
	return true
}

func (n *nemesis) release(slot *bool) {
	n.mu.Lock()
	*slot = false
	n.mu.Unlock()
}

func (n *nemesis) inject(kind string, hold time.Duration, replica int, pick uint64) {
	ctx := context.Background()
	f := fault{kind: kind, start: n.since()}
	var err error
	// A replica the harness is starting again after a crash (leader
	// election lost while the API server was away) is not a target.
	if kind == faultKillReplica || kind == faultStopReplica {
		if exited, _ := n.tether.Replicas()[replica].Process().Exited(); exited {
			return
		}
	}
	switch kind {
	case faultKillReplica:
		if !n.claim(&n.replica) {
			return
		}
		defer n.release(&n.replica)
		f.detail = fmt.Sprintf("replica %d, down %s", replica, hold)
		if err = n.tether.KillReplica(replica); err == nil {
			time.Sleep(hold)
			err = n.tether.StartReplicaAgain(ctx, replica)
		}
	case faultStopReplica:
		if !n.claim(&n.replica) {
			return
		}
		defer n.release(&n.replica)
		hold = max(hold, 20*time.Second) // past the replica Lease (15 s)
		f.detail = fmt.Sprintf("replica %d, stopped %s", replica, hold)
		p := n.tether.Replicas()[replica].Process()
		if err = p.Signal(syscall.SIGSTOP); err == nil {
			time.Sleep(hold)
			err = p.Signal(syscall.SIGCONT)
		}
	case faultStoreDown:
		f.detail = "for " + hold.String()
		err = n.hold(kind, n.tether.FailS3, hold)
	case faultStoreStall:
		f.detail = "for " + hold.String()
		err = n.hold(kind, n.tether.StallS3, hold)
	case faultKillSidecar:
		pods, listErr := n.runningBoundPods(ctx)
		if listErr != nil {
			logf("soak: fault %s skipped: the API server did not answer (%v)", kind, listErr)
			return
		}
		var alive []corev1.Pod
		for _, p := range pods {
			if n.runner.RunningSidecar(p.UID) != nil {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		p := alive[pick%uint64(len(alive))]
		f.detail = p.Namespace + "/" + p.Name + " (its trainer running; started again as the kubelet does)"
		if s := n.runner.RunningSidecar(p.UID); s != nil {
			err = s.Signal(syscall.SIGKILL)
		}
	case faultPreempt:
		n.mu.Lock()
		n.rivals++
		ns := fmt.Sprintf("soak-rival-%d", n.rivals)
		n.mu.Unlock()
		f.detail = fmt.Sprintf("%s/rival (%s CPUs, priority high) held %s", ns, rivalCPU, hold)
		err = n.preempt(ctx, ns, hold)
	case faultBlackhole:
		f.detail = "for " + hold.String()
		err = n.hold(kind, n.tether.BlackholeBinding, hold)
	case faultAPIServer, faultEtcd:
		if !n.claim(&n.control) {
			return
		}
		defer n.release(&n.control)
		down := hold / 4
		f.detail = "down " + down.String()
		if kind == faultAPIServer {
			_, err = n.c.RestartAPIServer(ctx, down)
		} else {
			_, err = n.c.RestartEtcd(ctx, down)
		}
	case faultKillNode:
		if !n.claim(&n.node) {
			return
		}
		defer n.release(&n.node)
		node, onIt, pickErr := n.nodeToKill(ctx, pick)
		if pickErr != nil {
			logf("soak: fault %s skipped: %v", kind, pickErr)
			return
		}
		if node == nil {
			return // no bound pod on a real node yet: owed, drawn again
		}
		f.detail = fmt.Sprintf("%s (running %s), down %s, then powered on", node.Name, onIt, hold)
		if err = node.Kill(ctx); err == nil {
			time.Sleep(hold)
			err = node.Restart(ctx)
		}
	case faultDeleteTrainer:
		running, listErr := n.runningPods(ctx)
		if listErr != nil {
			logf("soak: fault %s skipped: the API server did not answer (%v)", kind, listErr)
			return
		}
		if len(running) == 0 {
			return
		}
		p := running[pick%uint64(len(running))]
		f.detail = p.Namespace + "/" + p.Name
		err = retry(ctx, 45*time.Second, func() error { return client.IgnoreNotFound(n.c.Client.Delete(ctx, &p)) })
	}
	f.end = n.since()
	if err != nil {
		f.detail += ": " + err.Error()
		n.t.Errorf("fault %s: %v", f, err)
	}
	logf("soak: fault %s", f)
	n.mu.Lock()
	n.log = append(n.log, f)
	n.done[kind]++
	n.mu.Unlock()
}

// nodeToKill picks a real node running a labeled job's trainer pod, and
// names the pods it runs; nil when no real node runs one.
func (n *nemesis) nodeToKill(ctx context.Context, pick uint64) (*localcluster.RealNode, string, error) {
	pods, err := n.runningBoundPods(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("the API server did not answer (%v)", err)
	}
	on := map[string][]string{}
	var busy []*localcluster.RealNode
	for _, p := range pods {
		if rn := n.c.RealNodeNamed(p.Spec.NodeName); rn != nil {
			if len(on[rn.Name]) == 0 {
				busy = append(busy, rn)
			}
			on[rn.Name] = append(on[rn.Name], p.Namespace+"/"+p.Name)
		}
	}
	if len(busy) == 0 {
		return nil, "", nil
	}
	node := busy[pick%uint64(len(busy))]
	return node, strings.Join(on[node.Name], ", "), nil
}

// runningPods are the trainer pods running now (the soak's and rivals'),
// listed through another fault's API server or etcd restart.
func (n *nemesis) runningPods(ctx context.Context) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := retry(ctx, 45*time.Second, func() error { return n.c.Client.List(ctx, &pods, client.HasLabels{trainjob.JobSetNameLabel}) }); err != nil {
		return nil, err
	}
	var running []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running = append(running, p)
		}
	}
	return running, nil
}

// runningBoundPods are the running pods Tether injected (a sidecar runs).
func (n *nemesis) runningBoundPods(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := n.runningPods(ctx)
	if err != nil {
		return nil, err
	}
	var bound []corev1.Pod
	for _, p := range pods {
		if p.Annotations[names.PodStatusAnnotation] != "" {
			bound = append(bound, p)
		}
	}
	return bound, nil
}

// preempt creates an unlabeled TrainJob of priority class "high" asking for
// rivalCPU in cluster-queue, so Kueue preempts lower-priority jobs for it,
// holds it for hold once admitted (or until hold ends unadmitted), then
// deletes it: the preempted jobs are admitted again.
func (n *nemesis) preempt(ctx context.Context, ns string, hold time.Duration) error {
	if err := retry(ctx, 45*time.Second, func() error {
		return client.IgnoreAlreadyExists(n.c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}); err != nil {
		return err
	}
	if err := retry(ctx, 45*time.Second, func() error { return n.c.LocalQueue(ctx, ns, "user-queue") }); err != nil {
		return err
	}
	rival := testobj.MakeTrainJob("rival", ns).Runtime(localcluster.RuntimeName).Queue("user-queue").
		Label("kueue.x-k8s.io/priority-class", "high").
		ResourcesPerNode(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(rivalCPU)}).Obj()
	if err := retry(ctx, 45*time.Second, func() error { return client.IgnoreAlreadyExists(n.c.Client.Create(ctx, rival)) }); err != nil {
		return err
	}
	time.Sleep(hold)
	return retry(ctx, 45*time.Second, func() error {
		return client.IgnoreNotFound(n.c.Client.Delete(ctx, rival, client.PropagationPolicy(metav1.DeletePropagationBackground)))
	})
}

// heal waits for every fault to end, powers on a real node left down,
// and starts a replica left down again.
func (n *nemesis) heal(ctx context.Context) {
	n.wg.Wait()
	_ = n.tether.FailS3(false)
	_ = n.tether.StallS3(false)
	_ = n.tether.BlackholeBinding(false)
	for _, node := range n.c.RealNodes() {
		if !node.Running() {
			if err := node.Restart(ctx); err != nil {
				n.t.Errorf("healing node %s: %v", node.Name, err)
			}
		}
	}
	for i, r := range n.tether.Replicas() {
		_ = r.Process().Signal(syscall.SIGCONT)
		if ok, _ := r.Process().Exited(); ok {
			if err := n.tether.StartReplicaAgain(ctx, i); err != nil {
				n.t.Errorf("healing replica %d: %v", i, err)
			}
		}
	}
}

// counts is "kind: n" of every kind, and how many faults overlapped another.
func (n *nemesis) counts() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	by := map[string]int{}
	for _, f := range n.log {
		by[f.kind]++
	}
	var parts []string
	for _, k := range n.kinds {
		parts = append(parts, fmt.Sprintf("%s: %d", k, by[k]))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; %d overlapping", n.overlapsLocked())
}

// overlaps is how many faults started while another was still on.
func (n *nemesis) overlaps() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.overlapsLocked()
}

func (n *nemesis) overlapsLocked() int {
	sorted := slices.Clone(n.log)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].start < sorted[j].start })
	overlaps, on := 0, time.Duration(-1)
	for _, f := range sorted {
		if f.start < on {
			overlaps++
		}
		on = max(on, f.end)
	}
	return overlaps
}

// faultsDuring are the faults from the job's creation to a minute after its
// planned end.
func (n *nemesis) faultsDuring(j job) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	end := j.at + time.Duration(j.plan.Steps)*j.plan.StepInterval + time.Minute
	var out []string
	for _, f := range n.log {
		if f.end >= j.at && f.start <= end {
			out = append(out, f.String())
		}
	}
	return out
}
