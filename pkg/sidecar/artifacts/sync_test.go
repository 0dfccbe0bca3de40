package artifacts

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/manifestschema"
)

// tree writes files named by size and returns path → MD5.
func tree(t *testing.T, dir string, sizes map[string]int) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for rel, n := range sizes {
		sums[rel] = writeFile(t, dir, rel, randBytes(t, n))
	}
	return sums
}

func verifiedPaths(r *Report) []string {
	var out []string
	for _, f := range r.Verified {
		out = append(out, f.Path)
	}
	return out
}

// checkStored: every verified file of the report is stored with the local
// MD5 and size.
func checkStored(t *testing.T, env *s3env, job string, rep *Report, sums map[string]string) {
	t.Helper()
	for _, f := range rep.Verified {
		info, ok := env.stat(t, job+"/"+f.Path)
		if !ok || trimETag(info.ETag) != sums[f.Path] || f.MD5 != sums[f.Path] || info.Size != f.Size {
			t.Errorf("%s reported verified (md5 %s) but stored: %v %+v; local md5 %s", f.Path, f.MD5, ok, info, sums[f.Path])
		}
	}
}

// readManifest reads the manifest the Syncer stored, which must match the
// published schema (docs/manifest.schema.json).
func readManifest(t *testing.T, env *s3env, job string) upload.Manifest {
	t.Helper()
	raw := env.get(t, job+"/"+upload.ManifestName)
	if err := manifestschema.Validate(raw); err != nil {
		t.Errorf("the Syncer's manifest: %v", err)
	}
	var m upload.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSyncerFlushAndResume(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	sums := tree(t, dir, map[string]int{"empty": 0, "a.txt": 10, "ckpt/step-1.pt": 3 << 20, "ckpt/step-2.pt": 2<<20 + 1, "tether-progress.jsonl": 40})
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link")))

	u, c := newTestUploader(t, env, job, uploaderOpts{})
	s := newTestSyncer(t, newTestScanner(t, dir, nil), u, job)
	rep, err := s.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Verified) != len(sums) || rep.Uploaded != len(sums) || len(rep.Missing) != 0 || rep.Manifest != job+"/manifest.json" {
		t.Errorf("report %+v", rep)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Path != "link" {
		t.Errorf("skipped %+v", rep.Skipped)
	}
	checkStored(t, env, job, rep, sums)
	m := readManifest(t, env, job)
	if m.Version != "v1" || m.JobID != job || len(m.Files) != len(sums) {
		t.Errorf("manifest %+v", m)
	}
	for _, f := range m.Files {
		if sums[f.Path] != f.MD5 {
			t.Errorf("manifest entry %+v, local md5 %s", f, sums[f.Path])
		}
	}
	puts := c.putKeys()
	if puts[len(puts)-1] != job+"/manifest.json" {
		t.Errorf("the manifest was not the last PUT: %q", puts)
	}
	if s.UploadedBytes() != 5<<20+1+50 {
		t.Errorf("UploadedBytes = %d", s.UploadedBytes())
	}

	// The same Syncer again: nothing read, nothing sent but the manifest.
	heads := c.heads
	rep, err = s.Flush(context.Background())
	if err != nil || rep.Uploaded != 0 || len(rep.Verified) != len(sums) {
		t.Errorf("second flush: %+v, %v", rep, err)
	}
	if c.heads != heads || len(c.putKeys()) != len(puts)+1 {
		t.Errorf("second flush: %d HEADs, PUTs %q", c.heads-heads, c.putKeys()[len(puts):])
	}

	// A new sidecar (restart) over the same directory: the checkpoints are
	// HEAD, read and not sent; the small files are sent again with their
	// Content-MD5, in one round trip each (the binding server then stores
	// nothing: TestSmallFileResumeStoresNothing; versitygw here does).
	u2, c2 := newTestUploader(t, env, job, uploaderOpts{})
	s2 := newTestSyncer(t, newTestScanner(t, dir, nil), u2, job)
	rep, err = s2.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Uploaded != 3 || rep.AlreadyPresent != 2 {
		t.Errorf("after restart: %+v", rep)
	}
	want := []string{job + "/a.txt", job + "/empty", job + "/tether-progress.jsonl", job + "/manifest.json"}
	if got := c2.putKeys(); len(got) != len(want) || !slices.Equal(slices.Sorted(slices.Values(got[:3])), want[:3]) || got[3] != want[3] {
		t.Errorf("after restart, PUTs %q; want the small files, then the manifest", got)
	}
	if c2.heads != 2 {
		t.Errorf("after restart, %d HEADs; want the two checkpoints'", c2.heads)
	}
	if readManifest(t, env, job).Files == nil {
		t.Error("manifest lost")
	}
}

// A file that cannot be uploaded is reported missing; the others proceed;
// no manifest certifies the incomplete set.
func TestSyncerTooLargeFileIsMissingOthersProceed(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	sums := tree(t, dir, map[string]int{"a.txt": 10, "b/c.bin": 1 << 20})
	f, err := os.Create(filepath.Join(dir, "huge.bin"))
	must(t, err)
	must(t, f.Truncate(upload.MaxObjectSize+1))
	f.Close()

	u, c := newTestUploader(t, env, job, uploaderOpts{})
	s := newTestSyncer(t, newTestScanner(t, dir, nil), u, job)
	rep, err := s.Flush(context.Background())
	if err == nil || !strings.Contains(err.Error(), "huge.bin") || !strings.Contains(err.Error(), "tether.dev/exclude") {
		t.Errorf("err = %v", err)
	}
	if !slices.Equal(verifiedPaths(rep), []string{"a.txt", "b/c.bin"}) || !slices.Equal(rep.Missing, []string{"huge.bin"}) {
		t.Errorf("verified %q, missing %q", verifiedPaths(rep), rep.Missing)
	}
	checkStored(t, env, job, rep, sums)
	if rep.Manifest != "" || rep.ManifestErr == nil {
		t.Errorf("manifest %q uploaded despite a missing file", rep.Manifest)
	}
	if _, ok := env.stat(t, job+"/manifest.json"); ok {
		t.Error("a manifest is stored")
	}
	for _, k := range c.putKeys() {
		if strings.HasSuffix(k, "huge.bin") {
			t.Error("the huge file was sent")
		}
	}
}

func TestSyncerRunUploadsSettledFiles(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	writeFile(t, dir, "done.bin", []byte("done"))
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(filepath.Join(dir, "done.bin"), old, old))
	writeFile(t, dir, "writing.log", []byte("..."))

	u, c := newTestUploader(t, env, job, uploaderOpts{})
	sc := newTestScanner(t, dir, func(c *ScannerConfig) { c.Settle = time.Hour })
	s := newTestSyncer(t, sc, u, job)

	rep, err := s.FlushNow(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(verifiedPaths(rep), []string{"done.bin"}) || !slices.Equal(rep.Pending, []string{"writing.log"}) {
		t.Errorf("FlushNow: verified %q, pending %q", verifiedPaths(rep), rep.Pending)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	time.Sleep(100 * time.Millisecond) // a few rounds: nothing new to send
	if n := len(c.putKeys()); n != 1 {
		t.Errorf("PUTs %q while nothing settled", c.putKeys())
	}
	// Flush while Run is running: they take turns.
	rep, err = s.Flush(context.Background())
	if err != nil || len(rep.Verified) != 2 {
		t.Errorf("Flush during Run: %+v, %v", rep, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if _, ok := env.stat(t, job+"/writing.log"); !ok {
		t.Error("writing.log not stored after Flush")
	}
}

// The SIGTERM property: a Flush cancelled at a random moment leaves every
// file either verified (stored ETag == local MD5) or reported missing, never
// a partial file reported verified, and a manifest only over a complete set.
func TestFlushCancelledAtRandomPoints(t *testing.T) {
	env := needS3(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TETHER_TEST_SEED"); s != "" {
		seed = uint64(len(s)) // any fixed value reproduces
		for _, c := range s {
			seed = seed*31 + uint64(c)
		}
	}
	t.Logf("seed %d (set TETHER_TEST_SEED to fix it)", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	p := newFaultProxy(t, env, func(string, int) fault { return throttle })
	p.rate = 16 << 20 // ~100 ms for the files below

	var complete, partial int
	for trial := range 20 {
		job := newJobID()
		dir := t.TempDir()
		sizes := map[string]int{}
		for i := range 2 + rng.IntN(5) {
			sizes[filepathName(i)] = rng.IntN(2 << 20)
		}
		sums := tree(t, dir, sizes)
		u, _ := newTestUploader(t, env, job, uploaderOpts{url: p.url(), caPEM: p.caPEM()})
		s := newTestSyncer(t, newTestScanner(t, dir, nil), u, job)

		ctx, cancel := context.WithCancel(context.Background())
		delay := time.Duration(rng.IntN(400)) * time.Millisecond
		timer := time.AfterFunc(delay, cancel)
		rep, _ := s.Flush(ctx)
		timer.Stop()
		cancel()

		checkStored(t, env, job, rep, sums)
		got := slices.Concat(verifiedPaths(rep), rep.Missing)
		slices.Sort(got)
		want := slices.Sorted(func(yield func(string) bool) {
			for k := range sums {
				if !yield(k) {
					return
				}
			}
		})
		if !slices.Equal(got, want) {
			t.Errorf("trial %d: verified %q + missing %q ≠ files %q", trial, verifiedPaths(rep), rep.Missing, want)
		}
		_, stored := env.stat(t, job+"/"+upload.ManifestName)
		switch {
		case len(rep.Missing) == 0 && rep.Manifest != "":
			complete++
			m := readManifest(t, env, job)
			if len(m.Files) != len(sums) {
				t.Errorf("trial %d: manifest %+v", trial, m)
			}
		case rep.Manifest != "":
			t.Errorf("trial %d: manifest uploaded with missing files %q", trial, rep.Missing)
		default:
			partial++
			if stored && len(rep.Missing) > 0 {
				t.Errorf("trial %d: a manifest is stored although %q are missing", trial, rep.Missing)
			}
		}
		t.Logf("trial %d: cancel after %v: %d verified, %d missing, manifest %q", trial, delay, len(rep.Verified), len(rep.Missing), rep.Manifest)
	}
	t.Logf("%d trials complete, %d cancelled before the end", complete, partial)
}

func filepathName(i int) string {
	return []string{"model.safetensors", "ckpt/opt state.pt", "tokenizer.json", "-dash", "ünï/x.bin", "logs/a.log", "z"}[i]
}

// A flush whose time is already up (the budget spent, or a round still
// holding the sync) reports every file missing and uploads no manifest:
// found when the random-point test above drew a zero delay.
func TestFlushWithNoTimeLeftReportsEveryFileMissing(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	sums := tree(t, dir, map[string]int{"model.safetensors": 1 << 10, "ckpt/opt state.pt": 10})
	u, _ := newTestUploader(t, env, job, uploaderOpts{})
	s := newTestSyncer(t, newTestScanner(t, dir, nil), u, job)
	// A round holds the sync, as a periodic round would.
	s.sem <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := s.Flush(ctx)
	<-s.sem
	if err == nil {
		t.Fatal("flush with no time left returned no error")
	}
	if len(rep.Verified) != 0 || rep.Manifest != "" {
		t.Fatalf("claimed %v verified, manifest %q", rep.Verified, rep.Manifest)
	}
	if len(rep.Missing) != len(sums) {
		t.Fatalf("missing %q, want every file of %v", rep.Missing, sums)
	}
}

// A final flush whose time runs out waiting for a stuck round (the soak:
// the binding network black-holed for the whole flush budget) still counts
// the files verified earlier and unchanged since as verified: only the file
// never verified is missing. Before, every file was reported "not uploaded:
// not attempted", though the store held all but one.
func TestFlushWithNoTimeLeftKeepsEarlierVerifications(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	sums := tree(t, dir, map[string]int{"model.safetensors": 1 << 10, "ckpt/step-1.pt": 10})
	u, _ := newTestUploader(t, env, job, uploaderOpts{})
	s := newTestSyncer(t, newTestScanner(t, dir, nil), u, job)
	first, err := s.Flush(context.Background())
	if err != nil || len(first.Verified) != 2 {
		t.Fatalf("first round: %v, verified %v", err, verifiedPaths(first))
	}
	writeFile(t, dir, "ckpt/step-2.pt", randBytes(t, 10)) // never uploaded
	s.sem <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := s.Flush(ctx)
	<-s.sem
	if err == nil || rep.Manifest != "" {
		t.Fatalf("flush with no time left: %v, manifest %q; want an error and no manifest", err, rep.Manifest)
	}
	if got := verifiedPaths(rep); !slices.Equal(got, []string{"ckpt/step-1.pt", "model.safetensors"}) {
		t.Errorf("verified %q, want the two files verified before", got)
	}
	checkStored(t, env, job, rep, sums)
	if !slices.Equal(rep.Missing, []string{"ckpt/step-2.pt"}) {
		t.Errorf("missing %q, want only the file never uploaded", rep.Missing)
	}
}
