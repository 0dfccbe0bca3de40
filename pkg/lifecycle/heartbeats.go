package lifecycle

import (
	"fmt"
	"time"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// leaseReadRetry is how soon a replica's Lease that could not be read is
// read again.
const leaseReadRetry = time.Second

// checkHeartbeats catches a worker whose replica crashed: nobody holds its
// session, and it is silent past the budget. A node whose session a replica
// holds under a current Lease is that replica's to watch (its read deadline
// and liveness check record a silence); once the Lease expires the node is
// lost MissedHeartbeats intervals after the later of its last recorded
// heartbeat and the Lease's last renewal, unless another replica took the
// session. A node recorded without a Lease falls back to its recorded
// heartbeat, written at least every StatusInterval by a replica without one.
// It returns when to look again (0: no node to watch).
func checkHeartbeats(st *tetherv1.WorkerBindingStatus, settings tetherv1.WorkerBindingSettings, p Policy, leases *LeaseView, now time.Time) time.Duration {
	if st.Phase != tetherv1.PhaseRegistered && st.Phase != tetherv1.PhaseRunning {
		return 0
	}
	// While the view of the Leases is stale (the apiserver or etcd was
	// away: no renewal and no heartbeat write could land), silence in the
	// status says nothing of the workers: judge once it is current again.
	if leases != nil && !leases.Trusted {
		return leases.TrustWait
	}
	missed := time.Duration(p.MissedHeartbeats) * settings.HeartbeatInterval.Duration
	var next time.Duration
	for i := range st.Nodes {
		n := &st.Nodes[i]
		last := n.LastHeartbeatTime
		if last == nil {
			last = n.RegisteredTime
		}
		if last == nil || n.HeartbeatLost || n.Terminating || n.LastExit != nil && n.LastExit.ExitCode == 0 && !n.LastExit.Restarted {
			continue
		}
		since, budget, why, wait := silenceBudget(n, last.Time, p.StatusInterval+missed, missed, leases, now)
		switch {
		case wait > 0:
			next = minWait(next, wait)
			continue
		case wait < 0:
			continue // vouched for
		}
		if now.Sub(since) > budget {
			HeartbeatLost(st, n.Rank, why(now.Sub(since)))
			continue
		}
		next = minWait(next, budget-now.Sub(since)+time.Second)
	}
	return next
}

// silenceBudget is how long node n may be silent, from when, and why it is
// lost past that. A node whose replica's Lease could not be read waits
// (wait > 0: look again then); one vouched for by a current Lease is that
// replica's to watch (wait < 0: the Lease watcher reconciles the binding if
// the Lease expires).
func silenceBudget(n *tetherv1.NodeStatus, last time.Time, budget, missed time.Duration, leases *LeaseView, now time.Time) (
	since time.Time, _ time.Duration, why func(time.Duration) string, wait time.Duration) {
	since = last
	why = func(silent time.Duration) string {
		return fmt.Sprintf("no heartbeat recorded for %s", silent.Round(time.Second))
	}
	if n.SessionReplica == "" || leases == nil {
		return since, budget, why, 0
	}
	replica := n.SessionReplica
	lease, read := leases.Replicas[replica]
	switch {
	case !read:
		return since, budget, why, leaseReadRetry
	case lease.Found && now.Before(lease.Expires):
		return since, budget, why, -1
	}
	// The worker may have been heard up to one renewal period after the
	// Lease's last renewal: that much more, so that the node is lost only
	// after missedHeartbeats intervals of silence.
	budget = missed + lease.renewPeriod()
	if lease.Found && lease.Renewed.After(since) {
		since = lease.Renewed
		why = func(silent time.Duration) string {
			return fmt.Sprintf("no heartbeat for %s: replica %s, which held the session, stopped renewing its Lease at %s",
				silent.Round(time.Second), replica, lease.Renewed.UTC().Format(time.RFC3339))
		}
	} else {
		why = func(silent time.Duration) string {
			return fmt.Sprintf("no heartbeat recorded for %s, and replica %s, which held the session, holds no current Lease",
				silent.Round(time.Second), replica)
		}
	}
	return since, budget, why, 0
}

// LeaseReplicas are the replicas whose Leases Derive consults for st: those
// holding a node's session while the binding is Registered or Running.
func LeaseReplicas(st *tetherv1.WorkerBindingStatus) []string {
	if st.Phase != tetherv1.PhaseRegistered && st.Phase != tetherv1.PhaseRunning {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for i := range st.Nodes {
		if r := st.Nodes[i].SessionReplica; r != "" && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}
