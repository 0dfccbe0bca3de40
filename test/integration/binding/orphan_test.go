package binding

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
	"github.com/tether-dev/tether/pkg/sidecar/session"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// putProbe PUTs a small object with the job's token and returns the status.
func (p *rawPeer) putProbe(t *testing.T) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, p.cfg.ServerURL+"/"+upload.Bucket+"/"+p.cfg.JobID+"/probe.txt", strings.NewReader("probe"))
	req.ContentLength = 5
	req.Header.Set(names.HeaderArtifactToken, p.token)
	req.Header.Set(names.HeaderArtifactPodUID, p.cfg.Pod.UID)
	req.Header.Set(names.HeaderPodToken, p.j.podToken(t))
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: p.tls}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTokenDiesWithTrainJob deletes a running job's TrainJob with each
// cascade mode. This API server runs no garbage collector, so the test does
// what the collector would: for orphan, the TrainJob waits with the orphan
// finalizer until its dependents' ownerReferences are removed, then goes;
// for background, the TrainJob goes at once and its dependents stay (the
// collector would delete them later). Either way the token is refused within
// seconds of the delete on both replicas (the worker's session is on the
// second, which does not lead), the session is closed, the binding ends
// Failed/TrainJobDeleted and its token Secret is deleted.
func TestTokenDiesWithTrainJob(t *testing.T) {
	replica, err := env.StartReplica(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()
	for _, mode := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
			cfg := j.clientConfig()
			cfg.ServerURL = replica.BindingURL
			_, _, done := runningClient(t, cfg)
			j.waitPhase(t, tetherv1.PhaseRunning, "")
			p := newRawPeer(t, j)
			pr := newRawPeer(t, j)
			pr.cfg.ServerURL = replica.BindingURL
			for _, peer := range []*rawPeer{p, pr} {
				if code := peer.putProbe(t); code != http.StatusOK {
					t.Fatalf("PUT to %s before the delete: %d", peer.cfg.ServerURL, code)
				}
			}
			refusedBefore := counter(t, `tether_binding_refusals_total{reason="artifact_trainjob_deleted"}`) +
				counter(t, `tether_binding_refusals_total{reason="artifact_trainjob_terminating"}`)

			tj := testobj.MakeTrainJob(j.name, j.ns).Obj()
			deleted := time.Now()
			if err := env.Client.Delete(ctx, tj, client.PropagationPolicy(mode)); err != nil {
				t.Fatal(err)
			}
			var refusedAfter [2]time.Duration
			for i, peer := range []*rawPeer{p, pr} {
				eventually(t, 15*time.Second, func() error {
					if code := peer.putProbe(t); code != http.StatusUnauthorized {
						return fmt.Errorf("PUT to %s after the delete: %d, want 401", peer.cfg.ServerURL, code)
					}
					refusedAfter[i] = time.Since(deleted)
					return nil
				})
			}
			// Refused as revoked, or (once the controller has finalized the
			// binding, which can be first) as finished.
			if code, e := p.register(p.headers(), p.registerBody()); !(code == http.StatusUnauthorized && strings.Contains(e.Message, "TrainJob") ||
				code == http.StatusGone && strings.Contains(e.Message, lifecycle.ReasonTrainJobDeleted)) {
				t.Errorf("register after the delete: %d %+v, want 401 naming the TrainJob or 410 TrainJobDeleted", code, e)
			}
			select {
			case err := <-done:
				var pe *session.PermanentError
				if !errors.As(err, &pe) || (pe.CloseCode != binding.CloseRevoked && pe.CloseCode != binding.CloseFinished && pe.StatusCode != http.StatusUnauthorized) {
					t.Errorf("client ended with %v, want close %d or %d, or 401", err, binding.CloseRevoked, binding.CloseFinished)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the session outlived its TrainJob")
			}
			sessionClosed := time.Since(deleted)

			if mode == metav1.DeletePropagationOrphan {
				// Terminating, held by the orphan finalizer: the collector
				// removes the dependents' ownerReferences, then the finalizer.
				live := testobj.MakeTrainJob(j.name, j.ns).Obj()
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(live), live); err != nil {
					t.Fatalf("the orphan-deleted TrainJob: %v", err)
				}
				if live.GetDeletionTimestamp() == nil || !slices.Contains(live.GetFinalizers(), metav1.FinalizerOrphanDependents) {
					t.Fatalf("orphan delete left deletionTimestamp %v finalizers %v", live.GetDeletionTimestamp(), live.GetFinalizers())
				}
				removeOwnerRefs(t, j.binding(t))
				secret := &corev1.Secret{}
				if err := env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: binding.TokenSecretName(j.name)}, secret); err != nil {
					t.Fatal(err)
				}
				removeOwnerRefs(t, secret)
				live.SetFinalizers(slices.DeleteFunc(live.GetFinalizers(), func(f string) bool { return f == metav1.FinalizerOrphanDependents }))
				if err := env.Client.Update(ctx, live); err != nil {
					t.Fatal(err)
				}
			}

			wb := j.waitPhase(t, tetherv1.PhaseFailed, lifecycle.ReasonTrainJobDeleted)
			finalized := time.Since(deleted)
			if !strings.Contains(wb.Status.Message, j.name) {
				t.Errorf("binding message %q does not name the TrainJob", wb.Status.Message)
			}
			eventually(t, 15*time.Second, func() error {
				err := env.Client.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: binding.TokenSecretName(j.name)}, &corev1.Secret{})
				if !apierrors.IsNotFound(err) {
					return fmt.Errorf("token Secret still there (%v)", err)
				}
				return nil
			})
			secretGone := time.Since(deleted)
			if code := p.putProbe(t); code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("PUT after the binding was finalized: %d, want 401 or 403", code)
			}
			refused := counter(t, `tether_binding_refusals_total{reason="artifact_trainjob_deleted"}`) +
				counter(t, `tether_binding_refusals_total{reason="artifact_trainjob_terminating"}`)
			if refused <= refusedBefore {
				t.Errorf("refused PUTs not counted by reason: %v before, %v after", refusedBefore, refused)
			}
			t.Logf("%s delete: PUT refused %s after the delete (replica 1), %s (replica 2, probed after), session on replica 2 closed by %s, binding Failed/%s by %s, token Secret deleted by %s",
				mode, refusedAfter[0].Round(time.Millisecond), refusedAfter[1].Round(time.Millisecond), sessionClosed.Round(time.Millisecond), lifecycle.ReasonTrainJobDeleted,
				finalized.Round(time.Millisecond), secretGone.Round(time.Millisecond))
		})
	}
}

// removeOwnerRefs does what the garbage collector does to the dependents of
// an owner deleted with --cascade=orphan.
func removeOwnerRefs(t *testing.T, o client.Object) {
	t.Helper()
	patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
	o.SetOwnerReferences(nil)
	if err := env.Client.Patch(context.Background(), o, patch); err != nil {
		t.Fatal(err)
	}
}
