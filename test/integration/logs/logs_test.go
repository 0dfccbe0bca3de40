package logs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// TestTrainerLogArchivedWithItsEnd runs the real controller on a real API
// server. No kubelet runs here, so there is no container log to stream: the
// control plane's log source is a stand-in serving a generated 3 MiB log for
// the trainer container. Trigger (trainer terminated in pod status), tail
// cap, storage and status are the real ones.
func TestTrainerLogArchivedWithItsEnd(t *testing.T) {
	ctx := context.Background()
	log := make([]byte, 0, 3<<20)
	for i := 0; len(log) < 3<<20; i++ {
		log = fmt.Appendf(log, "step %d loss %.4f\n", i, 1/float64(i+1))
	}
	const capBytes = 1 << 20
	var mu sync.Mutex
	var asked []string
	source := func(_ context.Context, ns, pod, container string, _ bool) (io.ReadCloser, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, ns+"/"+pod+"/"+container)
		return io.NopCloser(bytes.NewReader(log)), nil
	}
	env := testenv.StartForTest(t, testenv.Options{ControlPlane: func(o *controlplane.Options) {
		o.LogSource = source
		o.LogCapBytes = capBytes
	}})

	ns := "logs"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	tj := testobj.MakeTrainJob("llm", ns).Bound().NumNodes(2).Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatal(err)
	}
	// Both nodes' trainer logs are archived, bound (node 0) or not (node 1).
	var pods []*corev1.Pod
	for _, idx := range []string{"0", "1"} {
		p := testobj.MakeTrainerPod("llm", ns).Routed().CompletionIndex(idx).Name("llm-node-0-" + idx).Obj()
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: metav1.Now()}}}}
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}

	wb := &tetherv1.WorkerBinding{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "llm"}, wb)
		if err == nil && wb.Status.Artifacts != nil && len(wb.Status.Artifacts.Logs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs not recorded on the binding: %+v", wb.Status.Artifacts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range pods {
		key := upload.LogKey(wb.Spec.JobID, p.Name)
		got, err := os.ReadFile(filepath.Join(env.ArtifactDir, filepath.FromSlash(key)))
		if err != nil {
			t.Fatalf("archived log %s: %v", key, err)
		}
		marker, rest, _ := bytes.Cut(got, []byte("\n"))
		if !strings.Contains(string(marker), "truncated") {
			t.Errorf("%s: a log over the cap has no truncation marker", key)
		}
		if !bytes.Equal(rest, log[len(log)-capBytes:]) {
			t.Errorf("%s: the archived bytes are not the log's last %d", key, capBytes)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(asked); n != 2 {
		t.Errorf("log source asked %d times (%v), want once per pod", n, asked)
	}
}
