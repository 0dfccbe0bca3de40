package replicalease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
)

// DefaultDuration is how long a replica's Lease vouches for its sessions
// after a renewal; it is renewed every third of it.
const DefaultDuration = 15 * time.Second

// Options configure the replica's Lease (KEP-589's answer to node
// heartbeats: one cheap object renewed every few seconds instead of a
// status write per worker). A zero Namespace runs without a Lease: every
// heartbeat-only status write then carries liveness, at most once per
// StatusInterval per binding, and SessionReplica stays empty.
type Options struct {
	// Client creates and renews the Lease, against the API server.
	Client client.Client
	// Namespace is the control plane's namespace; Name the Lease's, one per
	// process (NewName).
	Namespace, Name string
	// Duration is the Lease's leaseDurationSeconds (at least 3s).
	Duration time.Duration
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// NewName is a Lease name for one run of a replica on host (its pod
// name): a restarted process is another holder, so the sessions the old one
// vouched for are caught when its Lease stops being renewed.
func NewName(host string) string {
	h := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(host), "-"), "-")
	if len(h) > 200 {
		h = h[:200]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	if h == "" {
		return "tether-binding-" + hex.EncodeToString(b[:])
	}
	return "tether-binding-" + h + "-" + hex.EncodeToString(b[:])
}

// Lease keeps the replica's Lease renewed. A nil *Lease is a replica
// without one: it names none and never vouches.
type Lease struct {
	opts Options
	now  func() time.Time
	log  logr.Logger

	mu sync.Mutex
	// renewed is when the API server last accepted a renewal (this
	// replica's clock); zero before the first.
	renewed time.Time
}

// New returns the replica's Lease, or nil when opts name none (a zero
// Namespace or Name, or no Client). Run renews it.
func New(opts Options, now func() time.Time, log logr.Logger) *Lease {
	if opts.Namespace == "" || opts.Name == "" || opts.Client == nil {
		return nil
	}
	if opts.Duration == 0 {
		opts.Duration = DefaultDuration
	}
	return &Lease{opts: opts, now: now, log: log.WithValues("lease", opts.Namespace+"/"+opts.Name)}
}

// Name is the Lease's name, "" without a Lease.
func (l *Lease) Name() string {
	if l == nil {
		return ""
	}
	return l.opts.Name
}

// renewPeriod is how often the Lease is renewed.
func (l *Lease) renewPeriod() time.Duration { return l.opts.Duration / 3 }

// Vouching reports whether the Lease is current: renewed within its
// duration less one renew period, so the replica stops naming it on the
// binding before another replica's clock could see it expired.
func (l *Lease) Vouching(now time.Time) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.renewed.IsZero() && now.Sub(l.renewed) < l.opts.Duration-l.renewPeriod()
}

// Run creates the Lease and renews it until ctx ends. The Lease is left in
// place when the replica stops: its last renewal is when the replica last
// vouched for its sessions, which the controller needs to time their loss
// (the elected replica deletes Leases long expired).
func (l *Lease) Run(ctx context.Context) {
	t := time.NewTicker(l.renewPeriod())
	defer t.Stop()
	var lease *coordinationv1.Lease
	failures := 0
	for {
		var err error
		lease, err = l.renew(ctx, lease)
		switch {
		case err == nil:
			if failures > 0 {
				l.log.Info("replica lease renewed again", "failures", failures)
			}
			failures = 0
		case ctx.Err() != nil:
			return
		default:
			failures++
			lease = nil
			if failures == 1 || failures%10 == 0 {
				l.log.Error(err, "renewing the replica lease; its sessions' liveness is written to their bindings until it is renewed",
					"failures", failures)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// renew writes one renewal (creating the Lease the first time) and returns
// the Lease as stored.
func (l *Lease) renew(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, l.renewPeriod())
	defer cancel()
	now := metav1.NewMicroTime(l.now())
	if lease == nil {
		lease = &coordinationv1.Lease{}
		err := l.opts.Client.Get(ctx, types.NamespacedName{Namespace: l.opts.Namespace, Name: l.opts.Name}, lease)
		switch {
		case apierrors.IsNotFound(err):
			seconds := int32(l.opts.Duration / time.Second)
			lease = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: l.opts.Namespace, Name: l.opts.Name,
					Labels: map[string]string{names.ReplicaLeaseLabel: "true"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &l.opts.Name, LeaseDurationSeconds: &seconds,
					AcquireTime: &now, RenewTime: &now},
			}
			if err := l.opts.Client.Create(ctx, lease); err != nil {
				return nil, fmt.Errorf("creating Lease %s/%s: %w", l.opts.Namespace, l.opts.Name, err)
			}
			l.markRenewed(now.Time)
			return lease, nil
		case err != nil:
			return nil, fmt.Errorf("reading Lease %s/%s: %w", l.opts.Namespace, l.opts.Name, err)
		}
	}
	lease.Spec.RenewTime = &now
	if err := l.opts.Client.Update(ctx, lease); err != nil {
		return nil, fmt.Errorf("renewing Lease %s/%s: %w", l.opts.Namespace, l.opts.Name, err)
	}
	l.markRenewed(now.Time)
	return lease, nil
}

// markRenewed records a renewal that wrote renewTime at: the time written,
// not the answer's, so that vouching ends before the Lease expires for
// anyone reading it.
func (l *Lease) markRenewed(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewed = at
}
