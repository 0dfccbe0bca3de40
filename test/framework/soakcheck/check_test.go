package soakcheck

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// fsStore reads a real fs backend, as the soak reads its S3 store.
type fsStore struct{ fsstore.FSBackend }

func (s fsStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, _, err := s.FSBackend.Open(ctx, key)
	return rc, err
}

func sum(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }

// world builds a store and jobs for the checker.
type world struct {
	t     *testing.T
	store fsStore
}

func (w *world) put(key string, b []byte) {
	w.t.Helper()
	if _, err := w.store.Put(context.Background(), key, bytes.NewReader(b), int64(len(b))); err != nil {
		w.t.Fatal(err)
	}
}

// manifest stores node 0's manifest of job listing files and returns its
// SHA-256.
func (w *world) manifest(jobID string, files map[string][]byte) string {
	m := upload.Manifest{Version: "v1", JobID: jobID, PodUID: "pod"}
	for p, b := range files {
		m.Files = append(m.Files, upload.ManifestFile{Path: p, Size: int64(len(b)), MD5: sum(b)})
	}
	raw, _ := json.Marshal(m)
	w.put(upload.ManifestKey(jobID, 0), raw)
	s := sha256.Sum256(raw)
	return hex.EncodeToString(s[:])
}

// binding is the WorkerBinding ns/name.
func binding(name, jobID string, phase tetherv1.WorkerBindingPhase, nodes ...tetherv1.NodeStatus) *tetherv1.WorkerBinding {
	wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: tetherv1.WorkerBindingSpec{JobID: jobID}}
	wb.Status.Phase, wb.Status.Nodes = phase, nodes
	return wb
}

func attempt(wb *tetherv1.WorkerBinding, n int32) *tetherv1.WorkerBinding {
	wb.Status.Attempt = n
	return wb
}

// node0 is node 0 with its manifest sha verified.
func node0(sha string) tetherv1.NodeStatus {
	return tetherv1.NodeStatus{Rank: 0, Artifacts: &tetherv1.NodeArtifacts{Verified: true, ManifestSHA256: sha}}
}

func ok(jobID, key string, rank int) store.AccessRecord {
	return store.AccessRecord{RequestID: "r-" + key, Op: "put", Method: "PUT", Key: key, JobID: jobID, Binding: "ns/" + jobID, Rank: rank, Status: 200}
}

// TestCheckAHealthyRun: a job whose checkpoint was rewritten, whose store
// holds the last version its manifest lists, passes every invariant.
func TestCheckAHealthyRun(t *testing.T) {
	w := &world{t: t, store: fsStore{fsstore.FSBackend{Root: t.TempDir()}}}
	v1, v2, model := []byte("step 1, first"), []byte("step 1, rewritten"), []byte("model")
	w.put("job-a/ckpt/1.pt", v2)
	w.put("job-a/model.bin", model)
	sha := w.manifest("job-a", map[string][]byte{"ckpt/1.pt": v2, "model.bin": model})
	jobs := []Job{
		{Namespace: "ns", Name: "a", Labeled: true, JobID: "job-a", Nodes: 1, Ended: true,
			Wrote:   map[int][]Version{0: {{"ckpt/1.pt", sum(v1), 13}, {"ckpt/1.pt", sum(v2), 17}, {"model.bin", sum(model), 5}}},
			Binding: binding("a", "job-a", tetherv1.PhaseSucceeded, node0(sha))},
		{Namespace: "ns", Name: "plain", Ended: true},
	}
	access := []store.AccessRecord{ok("job-a", "job-a/ckpt/1.pt", 0), ok("job-a", "job-a/ckpt/1.pt", 0), ok("job-a", "job-a/model.bin", 0),
		{RequestID: "x", Op: "put", Key: "job-b/evil", JobID: "job-a", Rank: -1, Status: 403, Code: "AccessDenied"}}
	r := Check(context.Background(), Input{Jobs: jobs, Store: w.store, Access: access})
	if !r.OK() {
		t.Fatalf("a healthy run violates:\n%s", r)
	}
	want := map[string]int{NothingFalselyVerified: 3, NothingLost: 3, TruthfulEnd: 2, Isolation: 4, NothingLeftBehind: 2}
	for _, inv := range r.Invariants {
		if inv.Checked != want[inv.Name] {
			t.Errorf("%s checked %d, want %d\n%s", inv.Name, inv.Checked, want[inv.Name], r)
		}
	}
}

// TestCheckFindsEveryBreach: each invariant's breach is found, named with
// its job, file and the faults around it.
func TestCheckFindsEveryBreach(t *testing.T) {
	w := &world{t: t, store: fsStore{fsstore.FSBackend{Root: t.TempDir()}}}
	good, forged := []byte("what the trainer wrote"), []byte("what it never wrote")
	w.put("job-b/ckpt.pt", forged)
	sha := w.manifest("job-b", map[string][]byte{"ckpt.pt": forged})
	w.put("job-c/model.bin", good)
	shaC := w.manifest("job-c", map[string][]byte{"model.bin": good})
	w.put("job-c/.tether/pending/model.bin", good)
	w.put("job-d/model.bin", good)
	shaD := w.manifest("job-d", map[string][]byte{"model.bin": good})
	faults := []string{"t=12s SIGKILL replica 0"}
	jobs := []Job{
		{Namespace: "ns", Name: "b", Labeled: true, JobID: "job-b", Nodes: 1, Ended: true, Faults: faults,
			Wrote:   map[int][]Version{0: {{"ckpt.pt", sum(good), int64(len(good))}, {"lost.bin", sum(good), int64(len(good))}}},
			Binding: binding("b", "job-b", tetherv1.PhaseFailed, node0(sha))},
		{Namespace: "ns", Name: "c", Labeled: true, JobID: "job-c", Nodes: 2, Ended: true,
			Wrote:   map[int][]Version{0: {{"model.bin", sum(good), int64(len(good))}}},
			Binding: binding("c", "job-c", tetherv1.PhaseSucceeded, node0(shaC))},
		{Namespace: "ns", Name: "plain", Binding: binding("plain", "x", "")},
		// Its trainer failed once and was replaced, yet the binding says
		// it succeeded at its first attempt.
		{Namespace: "ns", Name: "d", Labeled: true, JobID: "job-d", Nodes: 1, Ended: true, MinAttempts: 2,
			Wrote:   map[int][]Version{0: {{"model.bin", sum(good), int64(len(good))}}},
			Binding: attempt(binding("d", "job-d", tetherv1.PhaseSucceeded, node0(shaD)), 1)},
	}
	// job-b's trainer wrote a.bin.tmp and renamed it: stored whole under
	// the temporary name it is no loss; a part of it is.
	w.put("job-b/a.bin.tmp", good)
	w.put("job-b/b.bin.tmp", []byte("what the tr"))
	access := []store.AccessRecord{ok("job-b", "job-b/lost.bin", 0), ok("job-c", "job-b/ckpt.pt", 0),
		ok("job-b", "job-b/a.bin.tmp", 0), ok("job-b", "job-b/b.bin.tmp", 0)}
	r := Check(context.Background(), Input{Jobs: jobs, Store: w.store, Access: access, Leftovers: []string{"Lease tether-system/session-job-b"}})
	got := map[string][]string{}
	for _, inv := range r.Invariants {
		for _, v := range inv.Violations {
			got[inv.Name] = append(got[inv.Name], v.Job+" "+v.File+": "+v.Detail)
		}
	}
	for name, want := range map[string][]string{
		NothingFalselyVerified: {"ns/b job-b/ckpt.pt: verified as MD5"},
		// job-c's write to job-b's key is isolation's: nothing of job-c's was lost.
		NothingLost:       {"ns/b job-b/lost.bin: stored by request", "ns/b job-b/b.bin.tmp: the store holds MD5"},
		TruthfulEnd:       {"ns/c : Succeeded with 1 of 2", "ns/plain : an unlabeled TrainJob neither ended nor ran", "ns/d : Succeeded at attempt 1"},
		Isolation:         {"ns/c job-b/ckpt.pt: request", "ns/plain : an unlabeled TrainJob has WorkerBinding"},
		NothingLeftBehind: {"ns/c job-c/.tether/pending/model.bin", " Lease tether-system/session-job-b"},
	} {
		if len(got[name]) != len(want) {
			t.Errorf("%s: %d violations %q, want %d", name, len(got[name]), got[name], len(want))
			continue
		}
		for i, w := range want {
			if !strings.HasPrefix(got[name][i], w) {
				t.Errorf("%s violation %d = %q, want it to start %q", name, i, got[name][i], w)
			}
		}
	}
	if s := r.String(); !strings.Contains(s, "faults: t=12s SIGKILL replica 0") || !strings.Contains(s, "nothing falsely verified") {
		t.Errorf("the report does not name the faults around a violation:\n%s", s)
	}
}

// TestCheckUnknownRankAndFalseNeverBound: an upload recorded before the
// binding knew its node count (rank -1) is judged against the rank its key
// names, so node 3's file is no loss; and a binding that failed as
// NeverBound ("no pod ran with the sidecar") while the job's token stored
// files is named: the soak's seed 7 once ended a 4-node job so.
func TestCheckUnknownRankAndFalseNeverBound(t *testing.T) {
	w := &world{t: t, store: fsStore{fsstore.FSBackend{Root: t.TempDir()}}}
	small := []byte("node 3's small file")
	w.put("job-e/nodes/3/small/file-1.txt", small)
	never := binding("e", "job-e", tetherv1.PhaseFailed)
	never.Status.Reason, never.Status.Message = tetherv1.ReasonNeverBound, "none of its trainer pods ever ran with the Tether sidecar"
	jobs := []Job{{Namespace: "ns", Name: "e", Labeled: true, JobID: "job-e", Nodes: 4, Ended: true,
		Wrote: map[int][]Version{3: {{"small/file-1.txt", sum(small), int64(len(small))}}}, Binding: never}}
	w.put("job-e/nodes/3/manifest.json", []byte(`{"version":"v1"}`))
	access := []store.AccessRecord{ok("job-e", "job-e/nodes/3/small/file-1.txt", -1), ok("job-e", "job-e/nodes/3/manifest.json", -1)}
	r := Check(context.Background(), Input{Jobs: jobs, Store: w.store, Access: access})
	for _, inv := range r.Invariants {
		switch inv.Name {
		case NothingLost:
			if inv.Checked != 1 || len(inv.Violations) != 0 {
				t.Errorf("nothing lost: %d checked, violations %+v; want node 3's file checked and kept", inv.Checked, inv.Violations)
			}
		case TruthfulEnd:
			if len(inv.Violations) != 1 || !strings.Contains(inv.Violations[0].Detail, "a sidecar ran") {
				t.Errorf("truthful end: violations %+v; want the false NeverBound named", inv.Violations)
			}
		default:
			if len(inv.Violations) != 0 {
				t.Errorf("%s: violations %+v", inv.Name, inv.Violations)
			}
		}
	}
}

// TestCheckNeverBoundWithRefusedRequests: a NeverBound binding whose
// job's pod reached the artifact endpoint, even only to be told to retry
// (the endpoint stores nothing from a pod the binding never recorded), is
// named: a sidecar ran. A NeverBound job with no such request passes.
func TestCheckNeverBoundWithRefusedRequests(t *testing.T) {
	w := &world{t: t, store: fsStore{fsstore.FSBackend{Root: t.TempDir()}}}
	never := func(name string) *tetherv1.WorkerBinding {
		b := binding(name, "job-"+name, tetherv1.PhaseFailed)
		b.Status.Reason, b.Status.Message = tetherv1.ReasonNeverBound, "none of its trainer pods ever ran with the Tether sidecar"
		return b
	}
	jobs := []Job{
		{Namespace: "ns", Name: "f", Labeled: true, JobID: "job-f", Nodes: 4, Ended: true, Binding: never("f")},
		{Namespace: "ns", Name: "g", Labeled: true, JobID: "job-g", Nodes: 1, Ended: true, Binding: never("g")},
	}
	refused := ok("job-f", "job-f/nodes/2/a.bin", -1)
	refused.Status, refused.Code, refused.Pod = 503, "ServiceUnavailable", "pod-2"
	r := Check(context.Background(), Input{Jobs: jobs, Store: w.store, Access: []store.AccessRecord{refused}})
	for _, inv := range r.Invariants {
		if inv.Name != TruthfulEnd {
			continue
		}
		if len(inv.Violations) != 1 || inv.Violations[0].Job != "ns/f" || !strings.Contains(inv.Violations[0].Detail, "reached the artifact endpoint (put ServiceUnavailable)") {
			t.Errorf("truthful end: violations %+v; want job f's false NeverBound named, and only it", inv.Violations)
		}
	}
}

func TestReadRecordAndAccessLog(t *testing.T) {
	vs, err := ReadRecord(strings.NewReader("ckpt/1.pt 0123456789abcdef0123456789abcdef 10\nmodel.bin 0123456789abcdef0123456789abcdef 5\nmodel.b"))
	if err != nil || len(vs) != 2 || vs[1] != (Version{"model.bin", "0123456789abcdef0123456789abcdef", 5}) {
		t.Fatalf("ReadRecord with a torn last line = %+v, %v", vs, err)
	}
	if _, err := ReadRecord(strings.NewReader("garbage\nmodel.bin 0123456789abcdef0123456789abcdef 5\n")); err == nil {
		t.Error("ReadRecord took a bad line that is not the last")
	}
	log := `{"level":"info","ts":1,"logger":"artifact-access","msg":"artifact access","requestID":"r1","op":"put","method":"PUT","key":"job-a/x","binding":"ns/a","jobID":"job-a","rank":0,"pod":"p","status":200,"outcome":"ok","bodyBytes":3,"duration":"1.5ms"}
not json
{"level":"info","logger":"binding","msg":"registered"}
{"level":"info","ts":2,"logger":"artifact-access","msg":"artifact access","requestID":"r2","op":"head","method":"HEAD","key":"job-a/y","binding":"ns/a","jobID":"job-a","rank":0,"status":404,"outcome":"NoSuchKey","duration":"1ms"}
`
	recs, err := ParseAccessLog(strings.NewReader(log))
	if err != nil || len(recs) != 2 || recs[0].Code != "" || recs[0].BodyBytes != 3 || recs[1].Code != "NoSuchKey" || recs[1].Status != 404 {
		t.Fatalf("ParseAccessLog = %+v, %v", recs, err)
	}
}
