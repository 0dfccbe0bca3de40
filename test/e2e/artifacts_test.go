package e2e

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/manifestschema"
)

// localFiles lists the files of a directory with their MD5, relative paths
// with forward slashes; a file still being written (*.tmp) and the paths
// skip names are left out.
func localFiles(t *testing.T, dir string, skip ...func(rel string) bool) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.HasSuffix(p, ".tmp") {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		for _, s := range skip {
			if s(rel) {
				return nil
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := md5.Sum(b)
		files[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// stored lists a job's stored objects (its manifest and the server's
// .tether/ keys, archived logs included, left out) with the MD5 of their content: the ETag
// from S3 (of an object stored in parts, the MD5 of the bytes read: its
// ETag is not one), or the file's MD5 in the fs backend (<dir>/<job-id>/<path>).
func (e *env) stored(t *testing.T, jobID string) map[string]string {
	t.Helper()
	if e.tether.S3 == nil {
		dir := filepath.Join(e.tether.ArtifactDir, jobID)
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return map[string]string{} // nothing stored yet
		}
		return localFiles(t, dir, skipServerKeys)
	}
	ctx := context.Background()
	keys, err := e.tether.S3.List(ctx, jobID+"/")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for key := range keys {
		rel := strings.TrimPrefix(key, jobID+"/")
		if skipServerKeys(rel) {
			continue
		}
		body, etag, err := e.tether.S3.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		out[rel] = contentMD5(body, etag)
	}
	return out
}

// contentMD5 is the MD5 of a stored object read whole: its ETag, unless it
// is a multipart ETag (an object stored in parts).
func contentMD5(body []byte, etag string) string {
	etag = strings.Trim(etag, `"`)
	if !upload.IsMultipartETag(etag) {
		return etag
	}
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:])
}

// storedLatest is stored with each file's latest verified version: its
// pending object where one waits (an upload that replaced an earlier
// version, promoted only when the job succeeds), else its final object.
// What a preempted or failed attempt flushed is there.
func (e *env) storedLatest(t *testing.T, jobID string) map[string]string {
	t.Helper()
	out := e.stored(t, jobID)
	if e.tether.S3 == nil {
		return out // the fs backend's pending objects are checked by the store's own tests
	}
	ctx := context.Background()
	prefix := jobID + "/" + upload.PendingDir
	keys, err := e.tether.S3.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for key := range keys {
		body, etag, err := e.tether.S3.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimPrefix(key, prefix)] = contentMD5(body, etag)
	}
	return out
}

// skipServerKeys says whether a stored path is not one of the trainer's
// files: the manifest, archived logs, the server's own keys.
func skipServerKeys(rel string) bool {
	if _, ok := upload.ManifestRank(rel, binding.MaxBoundNodes); ok {
		return true // a node's manifest
	}
	return strings.HasPrefix(rel, upload.ReservedDir+"/") // pending objects, uploads, archived logs
}

// sameFiles says whether every local file is stored with its MD5 as ETag.
func sameFiles(local, stored map[string]string) error {
	for rel, sum := range local {
		if stored[rel] != sum {
			return fmt.Errorf("%s: local md5 %s, stored etag %q", rel, sum, stored[rel])
		}
	}
	return nil
}

// lastModified is each stored key's Last-Modified time.
func (e *env) lastModified(t *testing.T, jobID string) map[string]time.Time {
	t.Helper()
	keys, err := e.tether.S3.List(context.Background(), jobID+"/")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// expectCheckpointDuringTraining waits until a checkpoint of the pod's
// trainer is stored with its local MD5, and fails if the trainer had
// already exited by then (the upload must happen during training).
func (e *env) expectCheckpointDuringTraining(t *testing.T, pod *corev1.Pod, jobID string) {
	t.Helper()
	dir := e.runner.ArtifactDir(pod)
	eventually(t, 30*time.Second, "a checkpoint verified during training", func() error {
		stored := e.stored(t, jobID)
		local := localFiles(t, dir)
		for rel, sum := range stored {
			if strings.HasPrefix(rel, "checkpoints/") && local[rel] == sum {
				return nil
			}
		}
		return fmt.Errorf("no checkpoint stored with the local MD5 yet (stored %v, local %v)", stored, local)
	})
	if p := e.podNow(t, pod.Namespace, pod.Name); p == nil || trainerTerminated(p) {
		t.Fatal("the trainer had already exited: the checkpoint was not uploaded during training")
	}
}

// expectSucceededWithArtifacts waits for Succeeded/TrainerSucceeded and
// checks the completion gate's evidence: exit code 0, a verified manifest
// listing every file the trainer wrote, each stored with its MD5, the final
// model among them. It returns the binding and the trainer's files.
func (e *env) expectSucceededWithArtifacts(t *testing.T, pod *corev1.Pod, name, jobID string) (*tetherv1.WorkerBinding, map[string]string) {
	t.Helper()
	wb := e.waitBinding(t, pod.Namespace, name, 90*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	a := wb.Status.Artifacts
	if a == nil || !a.ManifestVerified || ptr.Deref(wb.Status.TrainerExitCode, -1) != 0 {
		t.Fatalf("succeeded without a verified manifest or exit 0: artifacts %+v, exit code %v", a, wb.Status.TrainerExitCode)
	}
	local := localFiles(t, e.runner.ArtifactDir(pod))
	if err := sameFiles(local, e.stored(t, jobID)); err != nil {
		t.Fatalf("stored artifacts differ from the trainer's files: %v", err)
	}
	if int(a.Files) != len(local) {
		t.Errorf("manifest lists %d files, the trainer wrote %d (%v)", a.Files, len(local), local)
	}
	if _, ok := local["model/final.safetensors"]; !ok {
		t.Errorf("no final model among %v", local)
	}
	e.expectManifestsMatchSchema(t, wb)
	return wb, local
}

// expectManifestsMatchSchema checks every node's stored manifest against
// the published schema (docs/manifest.schema.json): what a reader in any
// language is promised is what the sidecar in the image writes.
func (e *env) expectManifestsMatchSchema(t *testing.T, wb *tetherv1.WorkerBinding) {
	t.Helper()
	checked := 0
	for _, n := range wb.Status.Nodes {
		if n.Artifacts == nil || n.Artifacts.Manifest == "" {
			continue
		}
		var raw []byte
		var err error
		if e.tether.S3 == nil {
			raw, err = os.ReadFile(filepath.Join(e.tether.ArtifactDir, filepath.FromSlash(n.Artifacts.Manifest)))
		} else {
			raw, _, err = e.tether.S3.Get(context.Background(), n.Artifacts.Manifest)
		}
		if err != nil {
			t.Fatalf("reading node %d's manifest %s: %v", n.Rank, n.Artifacts.Manifest, err)
		}
		if err := manifestschema.Validate(raw); err != nil {
			t.Errorf("node %d's manifest %s: %v\n%.2000s", n.Rank, n.Artifacts.Manifest, err, raw)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("no node of %s/%s records a manifest to check against the schema: nodes %+v", wb.Namespace, wb.Name, wb.Status.Nodes)
	}
}

// expectOnlyChangedSent checks what a resumed attempt sent: at least its new
// or changed files (final against afterFirst, the files when the previous
// attempt ended) plus the manifest, counted by the server's verified-files
// counter since putsBefore; a file it did not change keeps the Last-Modified
// it had in storedBefore. It returns how many files were new or changed.
func (e *env) expectOnlyChangedSent(t *testing.T, jobID string, afterFirst, final map[string]string, putsBefore float64, storedBefore map[string]time.Time) int {
	t.Helper()
	changed := 0
	for rel, sum := range final {
		if afterFirst[rel] != sum {
			changed++
		}
	}
	// At least every new or changed file and the manifest. A file the
	// trainer rewrites (the progress file, on every step) may be sent once
	// per close, so the count is not bounded above; what must never happen,
	// a file unchanged since the first attempt stored again, is checked
	// below by its Last-Modified.
	eventually(t, 20*time.Second, "verified PUTs of the resumed attempt", func() error {
		putsAfter, _ := e.metricValue(t, "tether_artifacts_verified_files_total")
		if got := int(putsAfter - putsBefore); got < changed+1 {
			return fmt.Errorf("the resumed attempt sent %d files, want at least %d (its %d new or changed files and the manifest)", got, changed+1, changed)
		}
		return nil
	})
	storedAfter := e.lastModified(t, jobID)
	for rel := range afterFirst {
		key := jobID + "/" + rel
		if afterFirst[rel] == final[rel] && !storedAfter[key].Equal(storedBefore[key]) {
			t.Errorf("%s was stored again by the resumed attempt (last modified %s -> %s)", rel, storedBefore[key], storedAfter[key])
		}
	}
	return changed
}
