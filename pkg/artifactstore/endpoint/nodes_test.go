package endpoint

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/upload"
)

// TestCheckNode: every write comes from its rank's current registered pod,
// in a single-node binding too, and a key under nodes/<r>/ written before
// the binding knows the job's node count waits unless node r's own pod
// sends it.
func TestCheckNode(t *testing.T) {
	multi := map[int]string{0: "uid-0", 1: "uid-1", 2: "uid-2"}
	cases := []struct {
		name   string
		nodes  int
		pods   map[int]string
		pod    string
		path   string
		status int // 0: allowed
		msg    string
	}{
		{"single node: its registered pod", 1, map[int]string{0: "uid-0"}, "uid-0", "ckpt/a.bin", 0, ""},
		{"single node: nodes/ is a plain path", 1, map[int]string{0: "uid-0"}, "uid-0", "nodes/3/a.bin", 0, ""},
		{"single node: no pod header", 1, map[int]string{0: "uid-0"}, "", "ckpt/a.bin", 403, "every write names its pod"},
		{"single node: a replaced pod", 1, map[int]string{0: "uid-new"}, "uid-old", "ckpt/a.bin", 403, "not node 0's current pod"},
		{"single node: nobody registered yet", 1, nil, "uid-0", "ckpt/a.bin", 503, "node 0 has no registered pod"},
		{"count unknown: nobody registered", 0, nil, "uid-1", "nodes/1/a.bin", 503, "node count yet"},
		{"count unknown: rank 0 key, nobody registered", 0, nil, "uid-0", "a.bin", 503, "node 0 has no registered pod"},
		{"count unknown: node r's own pod", 0, map[int]string{1: "uid-1"}, "uid-1", "nodes/1/a.bin", 0, ""},
		{"count unknown: rank 0's pod under nodes/", 0, map[int]string{0: "uid-0"}, "uid-0", "nodes/1/a.bin", 503, "node count yet"},
		{"count unknown: another node's key", 0, map[int]string{1: "uid-1", 2: "uid-2"}, "uid-2", "nodes/1/a.bin", 403, "not node 1's current pod"},
		{"count unknown: rank 0's key from node 1", 0, map[int]string{0: "uid-0", 1: "uid-1"}, "uid-1", "a.bin", 403, "not node 0's current pod"},
		{"multi-node: own key", 3, multi, "uid-2", "nodes/2/a.bin", 0, ""},
		{"multi-node: rank 0's key", 3, multi, "uid-0", "a.bin", 0, ""},
		{"multi-node: another node's key", 3, multi, "uid-1", "nodes/2/a.bin", 403, "not node 2's current pod"},
		{"multi-node: an unregistered rank", 3, map[int]string{0: "uid-0"}, "uid-1", "nodes/1/a.bin", 503, "node 1 has no registered pod"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodPut, "https://tether/tether-artifacts/job/"+tc.path, nil)
			if tc.pod != "" {
				r.Header.Set(names.HeaderArtifactPodUID, tc.pod)
			}
			rq := &request{r: r}
			rank, e := checkNode(rq, Job{JobID: "job", Nodes: tc.nodes, Pods: tc.pods}, tc.path)
			switch {
			case tc.status == 0 && e != nil:
				t.Fatalf("refused %d %s: %s", e.status, e.code, e.message)
			case tc.status == 0:
				// The rank whose keys the write touches: node r's own pod
				// under nodes/<r>/, also while the count is unknown.
				if want := upload.KeyRank(tc.path, max(tc.nodes, len(tc.pods))); rank != want && !(tc.nodes == 0 && rank == 1) {
					t.Fatalf("rank %d, want %d", rank, want)
				}
				return
			case e == nil:
				t.Fatalf("allowed, want %d (%s)", tc.status, tc.msg)
			case e.status != tc.status || !strings.Contains(e.message, tc.msg):
				t.Fatalf("refused %d %q, want %d naming %q", e.status, e.message, tc.status, tc.msg)
			case e.status == http.StatusServiceUnavailable && rq.retryAfter <= 0:
				t.Fatalf("503 without Retry-After")
			}
		})
	}
}
