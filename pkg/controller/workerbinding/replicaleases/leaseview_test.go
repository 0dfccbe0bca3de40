package replicaleases

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func selfLease(renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "self"},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: ptr.To[int32](15)}}
}

// The view of the Leases is trusted only a Lease duration after this
// process's own Lease shows current, at the start and after an outage of the
// apiserver or etcd (its own renewals could not land, so nobody's could):
// expiries seen meanwhile are the view's, not the replicas'.
func TestLeaseViewTrust(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := &ReplicaLeases{Self: "self"}
	if ok, _ := l.Trusted(t0); ok {
		t.Fatal("trusted before the first look")
	}
	l.observeSelf(selfLease(t0), t0)
	if ok, wait := l.Trusted(t0.Add(14 * time.Second)); ok || wait <= 0 {
		t.Errorf("trusted within a Lease duration of the start (wait %s)", wait)
	}
	if ok, _ := l.Trusted(t0.Add(16 * time.Second)); !ok {
		t.Error("not trusted a Lease duration after the start")
	}
	// The apiserver goes away: our own Lease is no longer renewed here.
	l.observeSelf(selfLease(t0.Add(15*time.Second)), t0.Add(31*time.Second))
	if ok, _ := l.Trusted(t0.Add(31 * time.Second)); ok {
		t.Error("trusted while this process's own Lease looks expired")
	}
	// It is back: our renewal is seen; every replica gets a Lease duration.
	back := t0.Add(60 * time.Second)
	l.observeSelf(selfLease(back), back)
	if ok, _ := l.Trusted(back.Add(5 * time.Second)); ok {
		t.Error("trusted right after the view came back")
	}
	l.observeSelf(selfLease(back.Add(5*time.Second)), back.Add(6*time.Second))
	if ok, _ := l.Trusted(back.Add(16 * time.Second)); !ok {
		t.Error("not trusted a Lease duration after the view came back")
	}
	// Without a Lease of its own (no binding server here): always trusted.
	if ok, _ := (&ReplicaLeases{}).Trusted(t0); !ok {
		t.Error("a view without Self not trusted")
	}
}
