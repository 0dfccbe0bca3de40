package logs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// TestSidecarCannotOverwriteTheArchivedLog: the controller archives a
// terminated trainer's log; a PUT with the job's token to that log's key
// is refused and the archived log stays as archived, while the trainer's
// own logs/<pod>.log is its own key.
func TestSidecarCannotOverwriteTheArchivedLog(t *testing.T) {
	ctx := context.Background()
	archived := []byte("step 1 loss 2.0\nstep 2 loss 1.0\n")
	env := testenv.StartForTest(t, testenv.Options{ControlPlane: func(o *controlplane.Options) {
		o.LogSource = func(context.Context, string, string, string, bool) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(archived)), nil
		}
	}})

	ns := "reserved"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, testobj.MakeTrainJob("llm", ns).Bound().Obj()); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	testenv.Eventually(t, 15*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: binding.TokenSecretName("llm")}, secret)
	})
	p := testobj.MakeTrainerPod("llm", ns).Routed().Obj()
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", FinishedAt: metav1.Now()}}}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	wb := &tetherv1.WorkerBinding{}
	testenv.Eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "llm"}, wb); err != nil {
			return err
		}
		if wb.Status.Artifacts == nil || len(wb.Status.Artifacts.Logs) == 0 {
			return errors.New("no log recorded on the binding yet")
		}
		return nil
	})
	logKey := upload.LogKey(wb.Spec.JobID, p.Name)
	if got := wb.Status.Artifacts.Logs; len(got) != 1 || got[0] != logKey {
		t.Fatalf("status.artifacts.logs = %q, want [%s]", got, logKey)
	}

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	podToken, err := testenv.PodToken(ctx, cs, p)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data[names.CABundleKey])
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	put := func(key string, body []byte) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, env.BindingURL+"/"+upload.Bucket+"/"+key, bytes.NewReader(body))
		req.Header.Set(names.HeaderArtifactToken, string(secret.Data[names.TokenKey]))
		req.Header.Set(names.HeaderArtifactPodUID, string(p.UID))
		req.Header.Set(names.HeaderPodToken, podToken)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(msg)
	}
	forged := []byte("nothing to see here\n")
	// The trainer's own logs/<pod>.log is one of its artifacts, written as any.
	if code, msg := put(wb.Spec.JobID+"/logs/"+p.Name+".log", forged); code != http.StatusOK {
		t.Fatalf("PUT of the trainer's own logs/%s.log: %d %s", p.Name, code, msg)
	}
	code, msg := put(logKey, forged)
	if code != http.StatusForbidden || !strings.Contains(msg, "reserved") {
		t.Errorf("a sidecar PUT to the archived log's key %s: %d %s, want 403 (reserved for the server)", logKey, code, msg)
	}
	got, err := os.ReadFile(filepath.Join(env.ArtifactDir, filepath.FromSlash(logKey)))
	if err != nil || !bytes.Equal(got, archived) {
		t.Errorf("archived log %s now holds %q (%v), want what the controller archived", logKey, got, err)
	}
}
