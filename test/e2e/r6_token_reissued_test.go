package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/localcluster"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// Real node, scenario 6: the token Secret is reissued while the pod runs
// (deleted; the controller issues a new token). The kubelet's Secret-volume
// update (its pod sync, 10s on this node) brings the new token into the
// running pod; meanwhile the old token keeps working, for the control
// plane's --token-overlap and no longer: then it is refused, the session
// opened with it is closed, and the sidecar goes on with the new one. The
// job succeeds with every file verified.
func TestRealNode6TokenReissued(t *testing.T) {
	shared(t)
	needRealNode(t)
	timed(t)
	ctx := context.Background()
	ns := suite.realNodeNamespace(t, "real-token")
	const name = "real-token-reissue"
	plan := localcluster.TrainerPlan{Steps: 75, CheckpointEvery: 5, StepInterval: time.Second}
	tj := bound(realTrainJob(name, ns, plan)).Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	pod := suite.waitRunningOnRealNode(t, suite.injectedPod(t, ns, name, ""))
	suite.waitBinding(t, ns, name, 30*time.Second, "Running", phaseIs(tetherv1.PhaseRunning, ""))

	key := types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName(name)}
	old := &corev1.Secret{}
	if err := suite.c.Client.Get(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	oldToken, ca := string(old.Data[names.TokenKey]), old.Data[names.CABundleKey]
	if err := suite.c.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	reissued := time.Now()
	var newToken string
	eventually(t, 30*time.Second, "a new token issued", func() error {
		s := &corev1.Secret{}
		if err := suite.c.Client.Get(ctx, key, s); err != nil {
			return err
		}
		if newToken = string(s.Data[names.TokenKey]); newToken == oldToken || newToken == "" {
			return fmt.Errorf("not reissued yet")
		}
		return nil
	})
	wb := suite.waitBinding(t, ns, name, 10*time.Second, "previous token recorded", func(wb *tetherv1.WorkerBinding) error {
		if wb.Spec.PreviousToken == nil || wb.Spec.PreviousToken.SHA256 != binding.Token(oldToken).Hash() {
			return fmt.Errorf("previous token %+v", wb.Spec.PreviousToken)
		}
		return nil
	})
	validUntil := wb.Spec.PreviousToken.ValidUntil.Time

	// The kubelet updates the running pod's token volume.
	n := nodeOf(t, pod)
	tokenFile := n.InNode(filepath.Join(n.Dir, "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~secret", mutate.TokenVolumeName, names.TokenKey))
	eventually(t, 90*time.Second, "the kubelet wrote the new token into the pod's volume", func() error {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		if string(b) != newToken {
			return fmt.Errorf("the pod's token file still holds the old token")
		}
		return nil
	})
	updated := time.Since(reissued)
	if time.Now().Before(validUntil) {
		if code := registerWith(t, oldToken, ca, pod, wb); code != http.StatusOK {
			t.Errorf("the old token during the overlap: register answered %d, want 200", code)
		}
	} else {
		t.Errorf("the kubelet took %s to update the token volume, longer than the overlap (until %s)", updated, validUntil)
	}

	// After the overlap: the old token is refused; its session closed; the
	// sidecar heartbeats on with the new token.
	time.Sleep(time.Until(validUntil) + time.Second)
	if code := registerWith(t, oldToken, ca, pod, wb); code != http.StatusUnauthorized {
		t.Errorf("the old token after the overlap: register answered %d, want 401", code)
	}
	eventually(t, 20*time.Second, "the old token's session closed", func() error {
		if v, _ := suite.metricValue(t, "tether_binding_sessions_closed_total", `reason="token_expired"`); v < 1 {
			return fmt.Errorf("no session closed as token_expired")
		}
		return nil
	})
	after := time.Now()
	suite.waitBinding(t, ns, name, 30*time.Second, "heartbeating with the new token", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Phase != tetherv1.PhaseRunning || wb.Status.LastHeartbeatTime == nil || !wb.Status.LastHeartbeatTime.After(after) {
			return fmt.Errorf("phase %s, last heartbeat %v", wb.Status.Phase, wb.Status.LastHeartbeatTime)
		}
		if wb.Spec.PreviousToken != nil {
			return fmt.Errorf("expired previous token still recorded")
		}
		return nil
	})

	wb = suite.waitBinding(t, ns, name, 120*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	pod = suite.waitPodSucceeded(t, pod)
	files := suite.expectStoredAsTrainerLeft(t, pod, jobID)
	if a := wb.Status.Artifacts; !a.ManifestVerified || int(a.Files) != len(files) {
		t.Errorf("manifest %+v, the trainer left %d files", a, len(files))
	}
	if s := containerStatus(pod, mutate.SidecarName); s.RestartCount != 0 {
		t.Errorf("the sidecar restarted %d times; a reissued token must not need a restart", s.RestartCount)
	}
	logf("real node 6: kubelet updated the token volume %s after the reissue; overlap until %s; %d files verified",
		updated.Round(time.Second), validUntil.Format(time.TimeOnly), wb.Status.Artifacts.Files)
}

// registerWith registers the pod's worker with token, as the sidecar does,
// and returns the HTTP status.
func registerWith(t *testing.T, token string, ca []byte, pod *corev1.Pod, wb *tetherv1.WorkerBinding) int {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	body, _ := json.Marshal(binding.RegisterRequest{JobID: wb.Spec.JobID, WorkerID: wb.Spec.WorkerID,
		Pod: binding.PodIdentity{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}})
	req, err := http.NewRequest(http.MethodPost, suite.tether.BindingURL()+binding.PathRegister, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(binding.HeaderAuthorization, "Bearer "+token)
	// What the pod's kubelet projects into its sidecar (this request plays
	// the sidecar): the pod's own token proves the pod it names.
	podToken, err := testenv.PodToken(context.Background(), suite.c.Clientset, pod)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(names.HeaderPodToken, podToken)
	req.Header.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	req.Header.Set(names.HeaderJobID, wb.Spec.JobID)
	req.Header.Set(names.HeaderWorkerID, wb.Spec.WorkerID)
	req.Header.Set(names.HeaderPodNamespace, pod.Namespace)
	req.Header.Set(names.HeaderPodName, pod.Name)
	req.Header.Set(names.HeaderPodUID, string(pod.UID))
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
