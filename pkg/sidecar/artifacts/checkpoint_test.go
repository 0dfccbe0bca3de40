package artifacts

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// settleHour: files are finished only when their mtime is an hour old, so
// a test decides which files a round takes by setting mtimes.
func settleHour(c *ScannerConfig) { c.Settle = time.Hour }

// finish makes rel look written long ago: the next round takes it.
func finish(t *testing.T, dir, rel string) {
	t.Helper()
	old := time.Now().Add(-2 * time.Hour)
	must(t, os.Chtimes(filepath.Join(dir, rel), old, old))
}

// flushNow runs a non-final round and returns the checkpoint it left.
func flushNow(t *testing.T, s *Syncer) *binding.Checkpoint {
	t.Helper()
	if _, err := s.FlushNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s.Checkpoint()
}

// checkCheckpoint: cp is path with files and bytes, and every one of its
// files is stored with the local MD5.
func checkCheckpoint(t *testing.T, env *s3env, job string, cp *binding.Checkpoint, path string, sums map[string]string, files ...string) {
	t.Helper()
	var bytes int64
	for _, f := range files {
		info, ok := env.stat(t, job+"/"+path+f)
		if !ok || trimETag(info.ETag) != sums[path+f] {
			t.Errorf("%s%s: stored %v %+v, want md5 %s", path, f, ok, info, sums[path+f])
		}
		bytes += info.Size
	}
	if cp == nil || cp.Path != path || cp.Files != len(files) || cp.Bytes != bytes || cp.VerifiedAt.IsZero() || time.Since(cp.VerifiedAt) > time.Hour {
		t.Fatalf("checkpoint %+v, want %s with %d files, %d bytes, verified now", cp, path, len(files), bytes)
	}
}

func TestSyncerReportsADirectoryCheckpointOnceEveryFileIsVerified(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	sums := tree(t, dir, map[string]int{"checkpoint-100/model.safetensors": 2<<20 + 3, "checkpoint-100/optimizer.pt": 1000,
		"checkpoint-100/scheduler/state.pt": 10, "train.log": 5})
	u, _ := newTestUploader(t, env, job, uploaderOpts{})
	s := newTestSyncer(t, newTestScanner(t, dir, settleHour), u, job)

	finish(t, dir, "checkpoint-100/model.safetensors")
	finish(t, dir, "train.log")
	if cp := flushNow(t, s); cp != nil {
		t.Fatalf("checkpoint %+v reported while two of its files are still being written", *cp)
	}
	if _, ok := env.stat(t, job+"/checkpoint-100/model.safetensors"); !ok {
		t.Fatal("the finished file of the checkpoint was not uploaded")
	}
	finish(t, dir, "checkpoint-100/optimizer.pt")
	if cp := flushNow(t, s); cp != nil {
		t.Fatalf("checkpoint %+v reported while a file in a subdirectory of it is still being written", *cp)
	}
	finish(t, dir, "checkpoint-100/scheduler/state.pt")
	cp := flushNow(t, s)
	checkCheckpoint(t, env, job, cp, "checkpoint-100/", sums, "model.safetensors", "optimizer.pt", "scheduler/state.pt")
	if cp.Step != 100 {
		t.Errorf("step %d, want 100", cp.Step)
	}
}

func TestSyncerKeepsTheOlderCompleteCheckpoint(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	sums := tree(t, dir, map[string]int{"out/checkpoint-100/model.pt": 3000, "out/checkpoint-100/trainer_state.json": 20})
	u, _ := newTestUploader(t, env, job, uploaderOpts{})
	s := newTestSyncer(t, newTestScanner(t, dir, settleHour), u, job)
	finish(t, dir, "out/checkpoint-100/model.pt")
	finish(t, dir, "out/checkpoint-100/trainer_state.json")
	checkCheckpoint(t, env, job, flushNow(t, s), "out/checkpoint-100/", sums, "model.pt", "trainer_state.json")

	// A newer checkpoint, one file uploaded and one still being written, and
	// a DCP one whose every shard is uploaded but whose .metadata is not
	// written yet: the older complete one stays.
	for rel, sum := range tree(t, dir, map[string]int{"out/checkpoint-200/model.pt": 3000, "out/checkpoint-200/trainer_state.json": 20,
		"dcp/step-300/__0_0.distcp": 100, "dcp/step-300/__1_0.distcp": 100}) {
		sums[rel] = sum
	}
	finish(t, dir, "out/checkpoint-200/model.pt")
	finish(t, dir, "dcp/step-300/__0_0.distcp")
	finish(t, dir, "dcp/step-300/__1_0.distcp")
	cp := flushNow(t, s)
	checkCheckpoint(t, env, job, cp, "out/checkpoint-100/", sums, "model.pt", "trainer_state.json")
	if _, ok := env.stat(t, job+"/dcp/step-300/__1_0.distcp"); !ok {
		t.Fatal("the DCP shards were not uploaded")
	}

	// A file of the complete checkpoint changed after it was verified: it
	// is not verified any more, so no checkpoint is complete.
	sums["out/checkpoint-100/model.pt"] = writeFile(t, dir, "out/checkpoint-100/model.pt", randBytes(t, 3001))
	if cp := flushNow(t, s); cp != nil {
		t.Fatalf("checkpoint %+v reported though a file of it changed after it was verified", *cp)
	}

	// The DCP checkpoint's metadata arrives: it is the newest complete one.
	sums["dcp/step-300/.metadata"] = writeFile(t, dir, "dcp/step-300/.metadata", randBytes(t, 50))
	finish(t, dir, "dcp/step-300/.metadata")
	checkCheckpoint(t, env, job, flushNow(t, s), "dcp/step-300/", sums, "__0_0.distcp", "__1_0.distcp", ".metadata")

	// The final flush takes every file: the newest step wins.
	if _, err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkCheckpoint(t, env, job, s.Checkpoint(), "dcp/step-300/", sums, "__0_0.distcp", "__1_0.distcp", ".metadata")
}
