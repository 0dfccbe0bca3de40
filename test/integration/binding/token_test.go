package binding

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
)

// TestReissuedTokenOverlap deletes a running job's token Secret. The
// controller issues a new token; the old one keeps working for the overlap
// (the kubelet has not updated the pod's token volume yet), then is refused,
// and the session opened with it is closed with CloseTokenExpired; the
// worker, whose token file now holds the new token, reconnects and goes on
// heartbeating without a gap in its phase.
func TestReissuedTokenOverlap(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	_, _, done := runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	oldPeer := newRawPeer(t, j)
	oldHash := binding.Token(oldPeer.token).Hash()

	key := types.NamespacedName{Namespace: j.ns, Name: binding.TokenSecretName(j.name)}
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, key, secret); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	reissued := time.Now()
	var newToken []byte
	eventually(t, 15*time.Second, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, key, s); err != nil {
			return err
		}
		if string(s.Data[names.TokenKey]) == oldPeer.token {
			return fmt.Errorf("token not reissued yet")
		}
		newToken = s.Data[names.TokenKey]
		return nil
	})
	seen := time.Now()
	wb := j.binding(t)
	p := wb.Spec.PreviousToken
	if p == nil || p.SHA256 != oldHash || wb.Spec.TokenSHA256 == oldHash {
		t.Fatalf("binding spec after reissue: token %s previous %+v; want the old hash %s as previous", wb.Spec.TokenSHA256, p, oldHash)
	}
	// The overlap runs from the reissue, which happened between the delete
	// and the moment the new token was seen (ValidUntil has whole seconds).
	if lo, hi := reissued.Add(tokenOverlap-time.Second), seen.Add(tokenOverlap+time.Second); p.ValidUntil.Time.Before(lo) || p.ValidUntil.Time.After(hi) {
		t.Errorf("previous token valid until %s; want the reissue (between %s and %s) plus %s",
			p.ValidUntil.Format(time.RFC3339), reissued.Format(time.RFC3339Nano), seen.Format(time.RFC3339Nano), tokenOverlap)
	}
	waitForEvent(t, j, "TokenReissued")

	// During the overlap the old token still works.
	if code, e := oldPeer.register(oldPeer.headers(), oldPeer.registerBody()); code != http.StatusOK {
		t.Fatalf("register with the previous token during the overlap: %d %+v", code, e)
	}
	// The kubelet updates the pod's token volume.
	if err := os.WriteFile(j.tokenFile, newToken, 0o600); err != nil {
		t.Fatal(err)
	}

	// After it, the old token is refused and its session closed; the worker
	// reconnects with the new token and keeps heartbeating.
	time.Sleep(time.Until(p.ValidUntil.Time) + 500*time.Millisecond)
	eventually(t, 10*time.Second, func() error {
		if code, _ := oldPeer.register(oldPeer.headers(), oldPeer.registerBody()); code != http.StatusUnauthorized {
			return fmt.Errorf("register with the expired previous token: %d, want 401", code)
		}
		return nil
	})
	eventually(t, 15*time.Second, func() error {
		if counter(t, `tether_binding_sessions_closed_total{reason="token_expired"}`) < 1 {
			select {
			case err := <-done:
				t.Fatalf("the worker stopped: %v", err)
			default:
			}
			return fmt.Errorf("no session closed as token_expired yet (sessions closed: %v; binding spec %+v)", metrics(t, "tether_binding_sessions_closed_total"), j.binding(t).Spec)
		}
		return nil
	})
	expiredAt := time.Now()
	eventually(t, 15*time.Second, func() error {
		wb := j.binding(t)
		if wb.Status.Phase != tetherv1.PhaseRunning {
			return fmt.Errorf("phase %s/%s", wb.Status.Phase, wb.Status.Reason)
		}
		if hb := wb.Status.LastHeartbeatTime; hb == nil || !hb.Time.After(expiredAt) {
			return fmt.Errorf("no heartbeat since the old token expired (last %v)", hb)
		}
		if wb.Spec.PreviousToken != nil {
			return fmt.Errorf("the expired previous token is still on the binding: %+v", wb.Spec.PreviousToken)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the worker stopped instead of reconnecting with the new token: %v", err)
	default:
	}
}

// TestDeletedBindingKeepsTheRunningToken deletes a running job's
// WorkerBinding: the controller binds the TrainJob again, and the new
// binding takes the token its Secret already holds (the one the running
// sidecar has mounted) instead of issuing one; the Secret is not rewritten
// and the worker goes on with its token. (A new binding's Secret is created
// without being read first; this is the case where it was there.)
func TestDeletedBindingKeepsTheRunningToken(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	j.waitPhase(t, tetherv1.PhasePending, "")
	key := types.NamespacedName{Namespace: j.ns, Name: binding.TokenSecretName(j.name)}
	before := &corev1.Secret{}
	if err := env.Client.Get(ctx, key, before); err != nil {
		t.Fatal(err)
	}
	token := binding.Token(before.Data[names.TokenKey])
	old := j.binding(t)
	if old.Spec.TokenSHA256 != token.Hash() {
		t.Fatalf("binding hash %s, the Secret's token's %s", old.Spec.TokenSHA256, token.Hash())
	}
	if err := env.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, func() error {
		wb := &tetherv1.WorkerBinding{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: j.name}, wb); err != nil {
			return err
		}
		switch {
		case wb.UID == old.UID:
			return fmt.Errorf("the deleted binding is still there")
		case wb.Spec.TokenSHA256 != token.Hash() || wb.Spec.PreviousToken != nil:
			return fmt.Errorf("the new binding holds token hash %s (previous %+v), want the Secret's %s and no previous", wb.Spec.TokenSHA256, wb.Spec.PreviousToken, token.Hash())
		}
		return nil
	})
	after := &corev1.Secret{}
	if err := env.Client.Get(ctx, key, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || string(after.Data[names.TokenKey]) != string(token) {
		t.Errorf("the token Secret was rewritten (resourceVersion %s, was %s): the running sidecar's token must stay", after.ResourceVersion, before.ResourceVersion)
	}
}
