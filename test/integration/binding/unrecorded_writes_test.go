package binding

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// A write counts only from the pod the binding records as its rank's
// current pod, in a single-node job too, and whatever the binding knows of
// the job's node count. Before, a single-node binding checked no pod, and a
// multi-node one none until it had read the job's node count: a replaced pod
// (alive, its pod token valid) overwrote its successor's files, and, before
// the count was known, rank 0 wrote rank 1's keys, rank 1 rank 0's, and a
// pod the binding never recorded stored files under a binding that then
// said nothing of the job had bound (the soak's false NeverBound).
func TestWritesOnlyFromTheRecordedPod(t *testing.T) {
	t.Run("single node: a replaced pod", func(t *testing.T) {
		old := newJob(t, nil)
		eventually(t, 20*time.Second, func() error {
			if n := nodeOf(old.binding(t), 0); n == nil || n.PodUID != string(old.pod.UID) {
				return fmt.Errorf("node 0's pod not recorded yet: %+v", n)
			}
			return nil
		})
		c := old.tokenClient(t)
		// The endpoint reads the binding from its replica's cache: until
		// that has the recorded pod it answers 503, and a sidecar retries.
		eventually(t, 20*time.Second, func() error {
			if code, msg := c.putAs(string(old.pod.UID), "model.bin", []byte("attempt 1")); code != http.StatusOK {
				return fmt.Errorf("node 0's pod writing: %d %s, want 200", code, msg)
			}
			return nil
		})
		// The pod is replaced while it is still terminating (a finalizer
		// holds it, as a kubelet that has not confirmed its end would): its
		// successor is node 0's pod from now on. Its name sorts before the
		// replaced pod's, and both are created within a second or two: the
		// newest is not decided by name.
		ctx := context.Background()
		held := old.pod.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(held), held); err != nil {
			t.Fatal(err)
		}
		held.Finalizers = append(held.Finalizers, "test.tether.dev/terminating")
		if err := env.Client.Update(ctx, held); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(held), held); err == nil {
				held.Finalizers = nil
				_ = env.Client.Update(ctx, held)
			}
		})
		if err := env.Client.Delete(ctx, held); err != nil {
			t.Fatal(err)
		}
		succ := testobj.MakeTrainerPod(old.name, old.ns).Routed().Name(old.name + "-node-0-0-a").Obj()
		mustCreate(t, succ)
		eventually(t, 20*time.Second, func() error {
			if n := nodeOf(old.binding(t), 0); n == nil || n.PodUID != string(succ.UID) {
				return fmt.Errorf("node 0's pod is not the successor yet: %+v", n)
			}
			return nil
		})
		// Once the endpoint's cache has the successor too (a key of no
		// consequence probes it), the replaced pod's write is refused.
		eventually(t, 20*time.Second, func() error {
			if code, msg := c.putAs(string(old.pod.UID), "probe.bin", []byte("probe")); code != http.StatusForbidden {
				return fmt.Errorf("the replaced pod's probe: %d %s, want 403", code, msg)
			}
			return nil
		})
		if code, msg := c.putAs(string(old.pod.UID), "model.bin", []byte("the replaced pod's bytes")); code != http.StatusForbidden {
			t.Fatalf("the replaced pod's write: %d %s, want 403 (not node 0's current pod)", code, msg)
		}
		if got := string(stored(t, c.prefix+"model.bin")); got != "attempt 1" {
			t.Fatalf("model.bin holds %q after the refused write, want %q", got, "attempt 1")
		}
	})

	t.Run("node count unknown", func(t *testing.T) {
		nodes := newTwoNodeJobCounted(t, false)
		eventually(t, 20*time.Second, func() error {
			wb := nodes[0].binding(t)
			for r := range int32(2) {
				if n := nodeOf(wb, r); n == nil || n.PodUID == "" {
					return fmt.Errorf("node %d's pod not recorded yet: %+v", r, wb.Status.Nodes)
				}
			}
			if wb.Status.NodeCount != 0 {
				return fmt.Errorf("node count %d recorded; the case is about an unknown one", wb.Status.NodeCount)
			}
			return nil
		})
		c0, c1 := nodes[0].tokenClient(t), nodes[1].tokenClient(t)
		pod0, pod1 := string(nodes[0].pod.UID), string(nodes[1].pod.UID)
		if code, msg := c0.putAs(pod0, "nodes/1/shard.bin", []byte("planted by rank 0")); code == http.StatusOK {
			t.Errorf("rank 0 writing rank 1's key while the count is unknown: %d %s, want refused", code, msg)
		}
		if code, msg := c1.putAs(pod1, "model.bin", []byte("planted by rank 1")); code != http.StatusForbidden {
			t.Errorf("rank 1 writing rank 0's key while the count is unknown: %d %s, want 403", code, msg)
		}
		// Each node's own keys are its own.
		if code, msg := c1.putAs(pod1, "nodes/1/shard.bin", []byte("rank 1's shard")); code != http.StatusOK {
			t.Errorf("rank 1 writing its own key: %d %s, want 200", code, msg)
		}
		if code, msg := c0.putAs(pod0, "model.bin", []byte("rank 0's model")); code != http.StatusOK {
			t.Errorf("rank 0 writing its own key: %d %s, want 200", code, msg)
		}
		if got := string(stored(t, c0.prefix+"nodes/1/shard.bin")); got != "rank 1's shard" {
			t.Errorf("nodes/1/shard.bin holds %q, want rank 1's", got)
		}
		if got := string(stored(t, c0.prefix+"model.bin")); got != "rank 0's model" {
			t.Errorf("model.bin holds %q, want rank 0's", got)
		}

		// A pod of the job the binding never recorded (not injected, so never
		// a node's pod), proving itself with its own pod token, stores nothing.
		stray := testobj.MakeTrainerPod(nodes[0].name, nodes[0].ns).CompletionIndex("3").Name(nodes[0].name + "-node-0-3").Obj()
		mustCreate(t, stray)
		file := filepath.Join(t.TempDir(), "pod-token")
		if err := testenv.WritePodToken(context.Background(), clientset(t), stray, file); err != nil {
			t.Fatal(err)
		}
		tok, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := nodes[0].tokenClient(t)
		sc.podToken, sc.podUID = string(tok), string(stray.UID)
		for _, key := range []string{"nodes/3/x.bin", "stray.bin"} {
			if code, msg := sc.putAs(string(stray.UID), key, []byte("stray")); code == http.StatusOK {
				t.Errorf("a pod the binding never recorded writing %s: %d %s, want refused", key, code, msg)
			}
		}
	})
}
