package pending

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// VerifiedPaths reads each verified manifest as promotion does (by its
// recorded digest, the pending version first) and gives its paths relative
// to the job's prefix: another node's under nodes/<rank>/.
func TestVerifiedPaths(t *testing.T) {
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
	checkpoint, final, node1 := manifest("model/model.safetensors", "config.json"), manifest("config.json"), manifest("shard-1.pt")
	put("job/manifest.json", checkpoint)
	// The final manifest overwrote the checkpoint's: it waits as the
	// pending version until promoted.
	put("job/.tether/pending/manifest.json", final)
	put("job/nodes/1/manifest.json", node1)
	s := &Store{Backend: b}

	got, err := s.VerifiedPaths(ctx, "job", []VerifiedManifest{{Rank: 0, SHA256: verify.ManifestDigest(final)}, {Rank: 1, SHA256: verify.ManifestDigest(node1)}})
	if want := []string{"config.json", "nodes/1/shard-1.pt"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the final manifests' paths: %q, %v; want %q", got, err, want)
	}
	got, err = s.VerifiedPaths(ctx, "job", []VerifiedManifest{{Rank: 0, SHA256: verify.ManifestDigest(checkpoint)}})
	if want := []string{"model/model.safetensors", "config.json"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("the checkpoint manifest's paths: %q, %v; want %q", got, err, want)
	}
	_, err = s.VerifiedPaths(ctx, "job", []VerifiedManifest{{Rank: 0, SHA256: verify.ManifestDigest(manifest("gone.bin"))}})
	var nl *NotAsListedError
	if !errors.As(err, &nl) || nl.Rank != 0 || nl.Path != upload.ManifestName {
		t.Errorf("a digest no stored version has: %v, want a NotAsListedError on node 0's manifest", err)
	}
}
