package replicaleases

import (
	"context"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// SessionReplicaIndex indexes WorkerBindings by the replicas (Lease names)
// their nodes' sessions are recorded as held by.
const SessionReplicaIndex = "status.nodes.sessionReplica"

// IndexSessionReplica is the indexer function for SessionReplicaIndex.
func IndexSessionReplica(o client.Object) []string {
	wb := o.(*tetherv1.WorkerBinding)
	var out []string
	for i := range wb.Status.Nodes {
		if r := wb.Status.Nodes[i].SessionReplica; r != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// replicaLeasePoll is how often the elected replica looks at the Leases.
const replicaLeasePoll = time.Second

// staleReplicaLease is how long after its last renewal a replica's Lease
// is deleted: long after every session it vouched for was taken over or
// recorded lost.
const staleReplicaLease = time.Hour

// ReplicaLeases tells the binding controller which binding-server replicas
// still vouch for the sessions they hold: each renews its own Lease
// (pkg/replicalease) and writes a binding's heartbeats only now and then.
// When a Lease expires, every binding naming it is reconciled, so that its
// nodes are HeartbeatLost on time unless another replica took them over.
type ReplicaLeases struct {
	// Client reads the labeled Leases and the WorkerBindings from the cache
	// (with SessionReplicaIndex) and deletes stale Leases.
	Client client.Client
	// Namespace is the control plane's.
	Namespace string
	// Selector picks the replicas' Leases (their label).
	Selector client.MatchingLabels
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Self is this process's own replica Lease ("": none). This process
	// knows it is alive: while its own Lease looks expired here, the view
	// of every Lease is stale (the apiserver or etcd away, the cache not
	// updated), and no other replica is judged dead by it.
	Self string

	events chan event.GenericEvent

	mu sync.Mutex
	// trustedFrom is when the view may be trusted again: a full Lease
	// duration after Self's Lease was last seen current again (or after
	// the start), so every replica had the time to renew once the view
	// came back, as the node lifecycle controller gives nodes a grace after
	// its own start. Zero while the view is stale.
	trustedFrom time.Time
	started     bool
}

// State is what a binding's node needs to know of its replica's Lease.
type State struct {
	Found bool
	// Renewed is the Lease's last renewal; expires adds its duration.
	Renewed, Expires time.Time
}

func (l *ReplicaLeases) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Trusted says whether Lease expiries seen now are the replicas' own doing,
// not a stale view, and if not, how long to wait before asking again.
func (l *ReplicaLeases) Trusted(now time.Time) (bool, time.Duration) {
	if l.Self == "" {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.started || l.trustedFrom.IsZero():
		return false, replicaLeasePoll
	case now.Before(l.trustedFrom):
		return false, l.trustedFrom.Sub(now) + replicaLeasePoll
	}
	return true, 0
}

// observeSelf updates the view's trust from this process's own Lease as
// the cache shows it now.
func (l *ReplicaLeases) observeSelf(self *coordinationv1.Lease, now time.Time) {
	if l.Self == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	current := false
	var d time.Duration
	if self != nil {
		renewed, expires := leaseTimes(self)
		current, d = now.Before(expires), expires.Sub(renewed)
	}
	switch {
	case !current:
		l.trustedFrom = time.Time{}
	case l.trustedFrom.IsZero() || !l.started:
		l.trustedFrom = now.Add(d)
	}
	l.started = true
}

// Events is the channel the controller watches (a binding to reconcile).
func (l *ReplicaLeases) Events() chan event.GenericEvent {
	if l.events == nil {
		l.events = make(chan event.GenericEvent, 1024)
	}
	return l.events
}

// RenewPeriod is how often the replica renews its Lease (a third of its
// duration, as pkg/replicalease does); 0 for a Lease not found.
func (s State) RenewPeriod() time.Duration { return s.Expires.Sub(s.Renewed) / 3 }

// Lookup reads replica's Lease from the cache.
func (l *ReplicaLeases) Lookup(ctx context.Context, replica string) (State, error) {
	lease := &coordinationv1.Lease{}
	err := l.Client.Get(ctx, types.NamespacedName{Namespace: l.Namespace, Name: replica}, lease)
	switch {
	case apierrors.IsNotFound(err):
		return State{}, nil
	case err != nil:
		return State{}, err
	}
	renewed, expires := leaseTimes(lease)
	return State{Found: true, Renewed: renewed, Expires: expires}, nil
}

func leaseTimes(lease *coordinationv1.Lease) (renewed, expires time.Time) {
	switch {
	case lease.Spec.RenewTime != nil:
		renewed = lease.Spec.RenewTime.Time
	case lease.Spec.AcquireTime != nil:
		renewed = lease.Spec.AcquireTime.Time
	default:
		renewed = lease.CreationTimestamp.Time
	}
	var d time.Duration
	if lease.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return renewed, renewed.Add(d)
}

// NeedLeaderElection is true: the elected replica runs the controller.
func (l *ReplicaLeases) NeedLeaderElection() bool { return true }

// Start polls the Leases until ctx ends: a Lease that expired (or went
// away) since the last look has its bindings reconciled; one stale for
// staleReplicaLease is deleted.
func (l *ReplicaLeases) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("replica-leases")
	events := l.Events()
	live := map[string]bool{} // Lease name -> not expired at the last look
	resync := false           // the view was stale: judge every Lease afresh
	t := time.NewTicker(replicaLeasePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var leases coordinationv1.LeaseList
		if err := l.Client.List(ctx, &leases, client.InNamespace(l.Namespace), l.Selector); err != nil {
			log.Error(err, "listing the replicas' Leases")
			continue
		}
		now := l.now()
		var self *coordinationv1.Lease
		for i := range leases.Items {
			if leases.Items[i].Name == l.Self {
				self = &leases.Items[i]
			}
		}
		l.observeSelf(self, now)
		if ok, _ := l.Trusted(now); !ok {
			// A stale view: expiries are not the replicas' doing. Judge
			// again once the view is back and every replica renewed: then
			// every Lease still expired has its bindings reconciled.
			resync = true
			continue
		}
		seen := map[string]bool{}
		var ended []string
		for i := range leases.Items {
			lease := &leases.Items[i]
			seen[lease.Name] = true
			renewed, expires := leaseTimes(lease)
			valid := now.Before(expires)
			if was, known := live[lease.Name]; (resync || known && was) && !valid {
				ended = append(ended, lease.Name)
			}
			live[lease.Name] = valid
			if !valid && now.Sub(renewed) > staleReplicaLease {
				if err := l.Client.Delete(ctx, lease); err != nil && !apierrors.IsNotFound(err) {
					log.Error(err, "deleting a stale replica Lease", "lease", lease.Name)
				}
			}
		}
		for name, was := range live {
			if !seen[name] {
				if was {
					ended = append(ended, name)
				}
				delete(live, name)
			}
		}
		resync = false
		for _, name := range ended {
			var bindings tetherv1.WorkerBindingList
			if err := l.Client.List(ctx, &bindings, client.MatchingFields{SessionReplicaIndex: name}); err != nil {
				log.Error(err, "listing the bindings of an expired replica Lease", "lease", name)
				continue
			}
			log.Info("a binding-server replica stopped renewing its Lease: checking the heartbeats it held",
				"lease", name, "bindings", len(bindings.Items))
			for i := range bindings.Items {
				select {
				case events <- event.GenericEvent{Object: &bindings.Items[i]}:
				case <-ctx.Done():
					return nil
				}
			}
		}
	}
}
