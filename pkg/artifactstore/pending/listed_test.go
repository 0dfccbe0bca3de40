package pending

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// Listed answers from the verified version of a manifest (by its recorded
// digest, the pending version first), keeps what it read by digest, and
// forgets the least recently asked manifests past its bound.
func TestListed(t *testing.T) {
	ctx := context.Background()
	b, err := fsstore.NewFSBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	manifest := func(paths ...string) []byte {
		m := upload.Manifest{Version: upload.ManifestVersion, JobID: "job", PodUID: "p"}
		for _, p := range paths {
			m.Files = append(m.Files, upload.ManifestFile{Path: p, Size: 0, MD5: "d41d8cd98f00b204e9800998ecf8427e"})
		}
		buf, _ := json.Marshal(m)
		return buf
	}
	put := func(key string, buf []byte) {
		t.Helper()
		if _, err := b.Put(ctx, key, bytes.NewReader(buf), int64(len(buf))); err != nil {
			t.Fatal(err)
		}
	}
	m0, m1 := manifest("a.bin", "dir/b.bin"), manifest("c.bin")
	put("job/manifest.json", m0)
	put("job/nodes/1/manifest.json", m1)
	// Room for node 1's one path, not for node 0's two besides it.
	l := &Listed{MaxBytes: 2*listedEntryOverhead + len("c.bin")}
	lists := func(rank int, sha, path string) bool {
		t.Helper()
		ok, err := l.Lists(ctx, b, "job", VerifiedManifest{Rank: rank, SHA256: sha}, path)
		if err != nil {
			t.Fatalf("Lists(%d, %s): %v", rank, path, err)
		}
		return ok
	}
	if !lists(0, verify.ManifestDigest(m0), "dir/b.bin") || lists(0, verify.ManifestDigest(m0), "c.bin") {
		t.Error("node 0's listing is wrong")
	}
	if !lists(1, verify.ManifestDigest(m1), "c.bin") || lists(1, verify.ManifestDigest(m1), "a.bin") {
		t.Error("node 1's listing is wrong")
	}
	// A newer manifest waits as the pending version: the verdict's digest
	// still finds the verified one.
	put("job/.tether/pending/manifest.json", manifest("other.bin"))
	if _, err := l.Lists(ctx, b, "job", VerifiedManifest{Rank: 0, SHA256: verify.ManifestDigest(manifest("x"))}, "a.bin"); !IsNotListable(err) {
		t.Errorf("a digest no stored version has: %v, want not listable", err)
	}
	// Kept by digest: the stored manifests gone, node 1's (asked last) is
	// still answered; node 0's (past the bound) was forgotten.
	for _, k := range []string{"job/manifest.json", "job/nodes/1/manifest.json", "job/.tether/pending/manifest.json"} {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if !lists(1, verify.ManifestDigest(m1), "c.bin") {
		t.Error("node 1's kept listing lost")
	}
	if _, err := l.Lists(ctx, b, "job", VerifiedManifest{Rank: 0, SHA256: verify.ManifestDigest(m0)}, "a.bin"); !IsNotListable(err) {
		t.Errorf("node 0's forgotten listing with its manifest gone: %v, want not listable", err)
	}
}

// countingOpener counts the objects opened.
type countingOpener struct {
	fsstore.FSBackend
	opened atomic.Int64
}

func (c *countingOpener) Open(ctx context.Context, key string) (io.ReadCloser, upload.ObjectInfo, error) {
	rc, info, err := c.FSBackend.Open(ctx, key)
	if err == nil {
		c.opened.Add(1)
	}
	return rc, info, err
}

// Many asking at once for a manifest not kept yet read it once.
func TestListedReadsOnceForMany(t *testing.T) {
	ctx := context.Background()
	fs, err := fsstore.NewFSBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &countingOpener{FSBackend: fs}
	m, _ := json.Marshal(upload.Manifest{Version: upload.ManifestVersion, JobID: "job", PodUID: "p",
		Files: []upload.ManifestFile{{Path: "a.bin", MD5: "d41d8cd98f00b204e9800998ecf8427e"}}})
	if _, err := b.Put(ctx, "job/manifest.json", bytes.NewReader(m), int64(len(m))); err != nil {
		t.Fatal(err)
	}
	var l Listed
	vm := VerifiedManifest{SHA256: verify.ManifestDigest(m)}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if ok, err := l.Lists(ctx, b, "job", vm, "a.bin"); !ok || err != nil {
				t.Errorf("Lists = %v, %v", ok, err)
			}
		})
	}
	wg.Wait()
	if n := b.opened.Load(); n != 1 {
		t.Errorf("the manifest was read %d times, want once", n)
	}
}
