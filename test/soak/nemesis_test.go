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
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/internal/localcluster"
	"github.com/tether-dev/tether/pkg/trainjob"
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
)

var faultKinds = []string{faultKillReplica, faultStopReplica, faultStoreDown, faultBlackhole, faultAPIServer, faultEtcd, faultDeleteTrainer}

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
// source: a new one every 8 to 20 s, each lasting 5 to 30 s. At most one
// replica is down or stopped at a time (the control plane runs two), and
// the API server and etcd are not restarted at once.
type nemesis struct {
	t      *testing.T
	c      *localcluster.Cluster
	tether *localcluster.Tether
	rng    *rand.Rand
	start  time.Time

	mu      sync.Mutex
	log     []fault
	replica bool // a replica is down or stopped
	control bool // the API server or etcd is down
	wg      sync.WaitGroup
}

func (n *nemesis) since() time.Duration { return time.Since(n.start) }

func (n *nemesis) run(ctx context.Context, w *workload) {
	// Every kind once first, in a seeded order, then any.
	order := n.rng.Perm(len(faultKinds))
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(8+n.rng.IntN(13)) * time.Second):
		}
		kind := faultKinds[n.rng.IntN(len(faultKinds))]
		if i < len(order) {
			kind = faultKinds[order[i]]
		}
		hold := time.Duration(5+n.rng.IntN(26)) * time.Second
		replica := n.rng.IntN(2)
		pick := n.rng.Uint64()
		n.wg.Go(func() { n.inject(kind, hold, replica, pick, w) })
	}
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

func (n *nemesis) inject(kind string, hold time.Duration, replica int, pick uint64, w *workload) {
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
		if err = n.tether.FailS3(true); err == nil {
			time.Sleep(hold)
			err = n.tether.FailS3(false)
		}
	case faultBlackhole:
		f.detail = "for " + hold.String()
		if err = n.tether.BlackholeBinding(true); err == nil {
			time.Sleep(hold)
			err = n.tether.BlackholeBinding(false)
		}
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
	case faultDeleteTrainer:
		var pods corev1.PodList
		// Through another fault's API server or etcd restart.
		listErr := retry(ctx, 45*time.Second, func() error { return n.c.Client.List(ctx, &pods, client.HasLabels{trainjob.JobSetNameLabel}) })
		if listErr != nil {
			logf("soak: fault %s skipped: the API server did not answer (%v)", kind, listErr)
			return
		}
		if err == nil {
			var running []corev1.Pod
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					running = append(running, p)
				}
			}
			if len(running) == 0 {
				return
			}
			p := running[pick%uint64(len(running))]
			f.detail = p.Namespace + "/" + p.Name
			err = retry(ctx, 45*time.Second, func() error { return client.IgnoreNotFound(n.c.Client.Delete(ctx, &p)) })
		}
	}
	f.end = n.since()
	if err != nil {
		f.detail += ": " + err.Error()
		n.t.Errorf("fault %s: %v", f, err)
	}
	logf("soak: fault %s", f)
	n.mu.Lock()
	n.log = append(n.log, f)
	n.mu.Unlock()
}

// heal waits for every fault to end, then for both replicas to be ready.
func (n *nemesis) heal(ctx context.Context) {
	n.wg.Wait()
	_ = n.tether.FailS3(false)
	_ = n.tether.BlackholeBinding(false)
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
	for _, k := range faultKinds {
		parts = append(parts, fmt.Sprintf("%s: %d", k, by[k]))
	}
	overlaps := 0
	sorted := slices.Clone(n.log)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].start < sorted[j].start })
	for i := 1; i < len(sorted); i++ {
		if sorted[i].start < sorted[i-1].end {
			overlaps++
		}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; %d overlapping", overlaps)
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
