package e2e

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// localFiles lists the files of a host artifact directory with their MD5.
func localFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".tmp") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := md5.Sum(b)
		files[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// storedETags lists the objects of a job in S3 (its manifest and the
// server's .tether/ keys excluded) with their ETags.
func storedETags(t *testing.T, jobID string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := suite.tether.S3.List(ctx, jobID+"/")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for key := range keys {
		rel := strings.TrimPrefix(key, jobID+"/")
		if rel == "manifest.json" || strings.HasPrefix(rel, ".tether/") || strings.HasPrefix(rel, "logs/") {
			continue
		}
		_, etag, err := suite.tether.S3.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		out[rel] = strings.Trim(etag, `"`)
	}
	return out
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
func lastModified(t *testing.T, jobID string) map[string]time.Time {
	t.Helper()
	keys, err := suite.tether.S3.List(context.Background(), jobID+"/")
	if err != nil {
		t.Fatal(err)
	}
	return keys
}
