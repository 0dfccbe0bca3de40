package endpoint

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// TestAccessRecords: one record per request, after its answer, saying
// whose token asked (its binding and job, never the token), for which key
// and rank, from which pod, and how it ended: a stored PUT, a token's
// attempt on another job's key, an unknown token, a HEAD of a missing key.
func TestAccessRecords(t *testing.T) {
	var mu sync.Mutex
	var records []store.AccessRecord
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()}, func(h *Handler, _ *httptest.Server) {
		h.Store = store.New(h.Store.Backend(), store.Options{OnAccess: func(a store.AccessRecord) {
			mu.Lock()
			defer mu.Unlock()
			records = append(records, a)
		}})
	})
	pod := http.Header{names.HeaderArtifactPodUID: {testPod}}
	a := e.minio(tokenA, pod)
	body := data(4096, 1)
	if _, err := e.put(a, "job-a/ckpt/step-1.pt", body); err != nil {
		t.Fatal(err)
	}
	if _, err := e.put(a, "job-b/ckpt/step-1.pt", body); err == nil {
		t.Fatal("job-a's token wrote job-b's key")
	}
	if _, err := e.put(e.minio(tokenNone, pod), "job-a/x", body); err == nil {
		t.Fatal("an unknown token wrote")
	}
	if _, err := a.StatObject(context.Background(), upload.Bucket, "job-a/missing", minio.StatObjectOptions{}); err == nil {
		t.Fatal("HEAD of a missing key found it")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		op, key, binding, jobID, code string
		status, rank                  int
		bodyBytes                     int64
	}{
		{"put", "job-a/ckpt/step-1.pt", "ml/job-a-wb", "job-a", "", http.StatusOK, 0, 4096},
		{"put", "job-b/ckpt/step-1.pt", "ml/job-a-wb", "job-a", "AccessDenied", http.StatusForbidden, -1, 0},
		{"put", "job-a/x", "", "", "AccessDenied", http.StatusUnauthorized, -1, 0},
		{"head", "job-a/missing", "ml/job-a-wb", "job-a", "NoSuchKey", http.StatusNotFound, 0, 0},
	}
	if len(records) != len(want) {
		t.Fatalf("%d access records, want %d: %+v", len(records), len(want), records)
	}
	for i, w := range want {
		r := records[i]
		if r.Op != w.op || r.Key != w.key || r.Binding != w.binding || r.JobID != w.jobID || r.Code != w.code ||
			r.Status != w.status || r.Rank != w.rank || r.BodyBytes != w.bodyBytes || r.Pod != testPod || r.RequestID == "" {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
	for _, tok := range allTokens {
		if strings.Contains(fmt.Sprintf("%+v", records), tok) {
			t.Errorf("an access record holds token %s", tok)
		}
	}
}

// TestAccessRankWhileNodeCountUnknown: a record names the rank a key is
// of, and says it does not know (-1) for a key under nodes/<r>/ before the
// binding has recorded the job's node count: node r's in a multi-node job,
// a plain path of rank 0's in a single-node one (the soak once saw node
// 3's uploads logged as rank 0's).
func TestAccessRankWhileNodeCountUnknown(t *testing.T) {
	for _, c := range []struct {
		path  string
		nodes int
		want  int
	}{
		{"nodes/3/small/file-0012.txt", 0, -1},
		{"nodes/3/small/file-0012.txt", 4, 3},
		{"nodes/3/small/file-0012.txt", 1, 0},
		{"checkpoints/step-2.pt", 0, 0},
		{"nodes/0/x", 0, 0},
		{"nodes/x/y", 0, 0},
		{"nodes/9/y", 4, 0},
	} {
		if got := accessRank(c.path, c.nodes); got != c.want {
			t.Errorf("accessRank(%q, %d) = %d, want %d", c.path, c.nodes, got, c.want)
		}
	}
}
