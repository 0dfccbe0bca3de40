package ownwrites

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

func wbAt(rv, uid string, phase tetherv1.WorkerBindingPhase) *tetherv1.WorkerBinding {
	return &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "job", ResourceVersion: rv, UID: types.UID(uid)},
		Status: tetherv1.WorkerBindingStatus{Phase: phase}}
}

// A reconcile on a cache older than this reconciler's own write sees the
// write; once the cache has it, or a later write of someone else, or the
// binding is another object of the same name, the cache is trusted again.
func TestOwnWritesReadYourWrites(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o Tracker
	o.Wrote(wbAt("12", "u", tetherv1.PhasePending), t0)
	if got := o.Latest(wbAt("10", "u", ""), t0.Add(time.Second)); got.ResourceVersion != "12" || got.Status.Phase != tetherv1.PhasePending {
		t.Fatalf("stale cache: got rv %s phase %q, want the own write (12, Pending)", got.ResourceVersion, got.Status.Phase)
	}
	if got := o.Latest(wbAt("10", "other-uid", ""), t0.Add(time.Second)); got.UID != "other-uid" {
		t.Fatal("another object of the same name took the write of the earlier one")
	}
	o.Wrote(wbAt("12", "u", tetherv1.PhasePending), t0)
	if got := o.Latest(wbAt("12", "u", tetherv1.PhasePending), t0.Add(time.Second)); got.ResourceVersion != "12" {
		t.Fatalf("caught-up cache: rv %s", got.ResourceVersion)
	}
	// Caught up: forgotten, so an older cache read later is the cache's.
	if got := o.Latest(wbAt("11", "u", ""), t0.Add(time.Second)); got.ResourceVersion != "11" {
		t.Fatalf("after the cache caught up, an own write was still used (rv %s)", got.ResourceVersion)
	}
	o.Wrote(wbAt("12", "u", tetherv1.PhasePending), t0)
	if got := o.Latest(wbAt("15", "u", tetherv1.PhaseRunning), t0.Add(time.Second)); got.ResourceVersion != "15" {
		t.Fatalf("a later write of another writer lost to the own one (rv %s)", got.ResourceVersion)
	}
	o.Wrote(wbAt("12", "u", tetherv1.PhasePending), t0)
	if got := o.Latest(wbAt("10", "u", ""), t0.Add(ownWritesKept+time.Second)); got.ResourceVersion != "10" {
		t.Fatal("an own write older than ownWritesKept was used")
	}
	o.Wrote(wbAt("not-a-number", "u", tetherv1.PhasePending), t0)
	if got := o.Latest(wbAt("10", "u", ""), t0.Add(time.Second)); got.ResourceVersion != "10" {
		t.Fatal("a resource version that is not an integer was taken for newer")
	}
	// The copy handed out is the caller's to change.
	o.Wrote(wbAt("12", "u", tetherv1.PhasePending), t0)
	o.Latest(wbAt("10", "u", ""), t0).Status.Phase = tetherv1.PhaseFailed
	if got := o.Latest(wbAt("10", "u", ""), t0); got.Status.Phase != tetherv1.PhasePending {
		t.Fatal("a caller's change reached the remembered write")
	}
}

// A token Secret written stands for secretFreshFor, then is read again.
func TestOwnWritesFreshSecret(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o Tracker
	key := types.NamespacedName{Namespace: "team", Name: "job"}
	o.WroteSecret(key, &corev1.Secret{Data: map[string][]byte{"token": []byte("t")}}, t0)
	s := o.FreshSecret(key, t0.Add(secretFreshFor-time.Millisecond))
	if s == nil || string(s.Data["token"]) != "t" {
		t.Fatalf("fresh Secret: %v", s)
	}
	s.Data["token"] = []byte("changed by the caller")
	if s := o.FreshSecret(key, t0); string(s.Data["token"]) != "t" {
		t.Fatal("a caller's change reached the remembered Secret")
	}
	if s := o.FreshSecret(key, t0.Add(secretFreshFor)); s != nil {
		t.Fatal("a Secret older than secretFreshFor stood for the API server's")
	}
	o.WroteSecret(key, &corev1.Secret{}, t0)
	o.Forget(key)
	if s := o.FreshSecret(key, t0); s != nil {
		t.Fatal("a forgotten TrainJob's Secret was remembered")
	}
}

// Expired entries are dropped by the sweep a write brings, at most once a
// second, whatever their number.
func TestOwnWritesPruned(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o Tracker
	for i := range 5000 {
		key := types.NamespacedName{Namespace: "team", Name: fmt.Sprintf("job-%d", i)}
		o.WroteSecret(key, &corev1.Secret{}, t0)
		wb := wbAt("12", "u", tetherv1.PhasePending)
		wb.Name = key.Name
		o.Wrote(wb, t0)
	}
	if len(o.secrets) != 5000 || len(o.m) != 5000 {
		t.Fatalf("%d Secrets, %d bindings remembered, want 5000 each (none expired)", len(o.secrets), len(o.m))
	}
	later := t0.Add(max(ownWritesKept, secretFreshFor) + time.Second)
	o.Wrote(wbAt("13", "u", tetherv1.PhasePending), later)
	o.WroteSecret(types.NamespacedName{Namespace: "team", Name: "late"}, &corev1.Secret{}, later)
	if len(o.m) != 1 || len(o.secrets) != 1 {
		t.Fatalf("after every write expired: %d bindings, %d Secrets remembered, want 1 and 1", len(o.m), len(o.secrets))
	}
}

// The watch events of this reconciler's own last write, or of anything
// before it, are echoes; a later write, another object of the same name, or
// a binding never written here are not.
func TestOwnWritesEcho(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o Tracker
	if o.Echo(wbAt("12", "u", "")) {
		t.Fatal("a binding this reconciler never wrote was taken for an echo")
	}
	o.Wrote(wbAt("12", "u", tetherv1.PhasePending), t0)
	for _, c := range []struct {
		rv, uid string
		want    bool
	}{{"12", "u", true}, {"11", "u", true}, {"13", "u", false}, {"12", "other-uid", false}, {"not-a-number", "u", false}} {
		if got := o.Echo(wbAt(c.rv, c.uid, "")); got != c.want {
			t.Errorf("event at rv %s uid %s: echo %v, want %v", c.rv, c.uid, got, c.want)
		}
	}
}

// A remembered Secret keeps what a reconcile reads of it, without its
// managedFields, and shares one CA bundle with the others that carry it.
func TestOwnWritesSecretKeptSlim(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o Tracker
	secret := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name + "-tether-token", ResourceVersion: "7",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "tether"}}},
			Data: map[string][]byte{names.TokenKey: []byte("token-" + name), names.CABundleKey: []byte("-----BEGIN CERTIFICATE-----")}}
	}
	a, b := types.NamespacedName{Namespace: "team", Name: "a"}, types.NamespacedName{Namespace: "team", Name: "b"}
	o.WroteSecret(a, secret("a"), t0)
	o.WroteSecret(b, secret("b"), t0)
	ka, kb := o.secrets[a].secret, o.secrets[b].secret
	if len(ka.ManagedFields) != 0 {
		t.Error("the remembered Secret kept its managedFields")
	}
	if &ka.Data[names.CABundleKey][0] != &kb.Data[names.CABundleKey][0] {
		t.Error("two Secrets with one CA bundle remember two copies of it")
	}
	got := o.FreshSecret(b, t0.Add(time.Second))
	if string(got.Data[names.TokenKey]) != "token-b" || got.ResourceVersion != "7" || string(got.Data[names.CABundleKey]) != "-----BEGIN CERTIFICATE-----" {
		t.Fatalf("fresh Secret: %+v", got)
	}
}

// A new binding's Secret stands for the API server's until the binding's
// first status is written, however late (but not past
// firstStatusKeptAtMost), then for secretFreshFor after it.
func TestOwnWritesSecretAwaitsFirstStatus(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o Tracker
	key, other := types.NamespacedName{Namespace: "team", Name: "job"}, types.NamespacedName{Namespace: "team", Name: "late"}
	o.WroteSecret(key, &corev1.Secret{}, t0)
	o.AwaitFirstStatus(key)
	o.WroteSecret(other, &corev1.Secret{}, t0)
	o.AwaitFirstStatus(other)
	late := t0.Add(secretFreshFor + time.Minute)
	if o.FreshSecret(key, late) == nil {
		t.Fatal("a Secret awaiting its binding's first status was read again after secretFreshFor")
	}
	if !o.FirstStatusWritten(key, late) {
		t.Fatal("a Secret awaiting its binding's first status was not reported awaited")
	}
	if o.FirstStatusWritten(key, late) {
		t.Fatal("a first status was reported awaited twice")
	}
	if o.FreshSecret(key, late.Add(secretFreshFor-time.Millisecond)) == nil {
		t.Fatal("a Secret did not stand for secretFreshFor after its binding's first status")
	}
	if o.FreshSecret(key, late.Add(secretFreshFor)) != nil {
		t.Fatal("a Secret whose binding has its first status stood past secretFreshFor after it")
	}
	if o.FreshSecret(other, t0.Add(firstStatusKeptAtMost)) != nil {
		t.Fatal("a Secret awaiting a first status stood past firstStatusKeptAtMost")
	}
}

// A binding this reconciler created stands in for the cache's while the
// cache has none yet: only for the TrainJob that controls it, within
// ownWritesKept, and not once a watch event showed it deleted.
func TestOwnWritesCreatedBeforeTheCacheHasIt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var o Tracker
	key := types.NamespacedName{Namespace: "team", Name: "job"}
	wb := wbAt("12", "u", "")
	wb.OwnerReferences = []metav1.OwnerReference{{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "job", UID: "tj-1", Controller: ptrTrue()}}
	if o.Created(key, "tj-1", t0) != nil {
		t.Fatal("a binding never written here was returned")
	}
	o.Wrote(wb, t0)
	if got := o.Created(key, "tj-1", t0.Add(time.Second)); got == nil || got.ResourceVersion != "12" {
		t.Fatalf("own create not returned before the cache had it: %+v", got)
	}
	if o.Created(key, "tj-2", t0.Add(time.Second)) != nil {
		t.Fatal("the binding of an earlier TrainJob of the same name was returned for a new one")
	}
	if o.Created(key, "tj-1", t0.Add(ownWritesKept+time.Second)) != nil {
		t.Fatal("an own create older than ownWritesKept was returned")
	}
	o.Wrote(wb, t0)
	o.Deleted(key)
	if o.Created(key, "tj-1", t0.Add(time.Second)) != nil {
		t.Fatal("a binding whose deletion was seen was returned")
	}
}

func ptrTrue() *bool { b := true; return &b }

// A verified token Secret stands for secretVerifiedFor, for the token and
// CA bundle it was verified with only, and not once its TrainJob is
// forgotten.
func TestSecretStands(t *testing.T) {
	var o Tracker
	t0 := time.Unix(1000, 0)
	key := types.NamespacedName{Namespace: "ns", Name: "tj"}
	ca := []byte("-----BEGIN CERTIFICATE-----")
	if o.SecretStands(key, "h1", ca, t0) {
		t.Fatal("a Secret never verified stands")
	}
	o.SecretVerified(key, "h1", ca, t0)
	if !o.SecretStands(key, "h1", ca, t0.Add(secretVerifiedFor-time.Second)) {
		t.Error("a Secret verified within the window does not stand")
	}
	if o.SecretStands(key, "h1", ca, t0.Add(secretVerifiedFor)) {
		t.Error("a Secret stands past the window")
	}
	if o.SecretStands(key, "h2", ca, t0) {
		t.Error("a Secret stands for a token the binding no longer holds")
	}
	if o.SecretStands(key, "h1", []byte("rotated"), t0) {
		t.Error("a Secret stands for a CA bundle rotated since")
	}
	o.Forget(key)
	if o.SecretStands(key, "h1", ca, t0) {
		t.Error("a forgotten TrainJob's Secret stands")
	}
}
