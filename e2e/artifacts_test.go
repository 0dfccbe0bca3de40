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

// stored lists a job's stored objects (its manifest, logs/ and the
// server's .tether/ keys left out) with the MD5 of their content: the ETag
// from S3, or the file's MD5 in the fs backend (<dir>/<job-id>/<path>).
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
		_, etag, err := e.tether.S3.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		out[rel] = strings.Trim(etag, `"`)
	}
	return out
}

// skipServerKeys says whether a stored path is not one of the trainer's
// files: the manifest, archived logs, the server's own keys.
func skipServerKeys(rel string) bool {
	return rel == "manifest.json" || strings.HasPrefix(rel, ".tether/") || strings.HasPrefix(rel, "logs/")
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
