package endpoint

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
)

// A manifest whose verdict could not be recorded (every PUT answered 503,
// the sidecar gave up) is still stored; StoredManifest gives the verdict the
// binding lacks, and notices an entry changed since.
func TestStoredManifestVerdictNobodyRecorded(t *testing.T) {
	fsb := fsstore.FSBackend{Root: t.TempDir()}
	e := newEnv(t, fsb)
	e.h.OnManifest = func(context.Context, Job, verify.ManifestResult) error {
		return errors.New("the apiserver is away")
	}
	files := map[string][]byte{"model.bin": data(100, 1), "ckpt/a.pt": data(300, 2)}
	e.mustPut("job-a/model.bin", files["model.bin"])
	e.mustPut("job-a/ckpt/a.pt", files["ckpt/a.pt"])
	m := manifestJSON(t, files, []string{"model.bin", "ckpt/a.pt"})
	if resp := e.raw("PUT", "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(m), int64(len(m)), nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("manifest PUT whose verdict cannot be recorded: %d, want 503", resp.StatusCode)
	}

	recheck := store.New(fsb, store.Options{})
	ctx := context.Background()
	res, found, err := recheck.StoredManifest(ctx, "job-a", 0)
	if err != nil || !found {
		t.Fatalf("StoredManifest: found %v, err %v", found, err)
	}
	if !res.Verified || res.Files != 2 || res.Bytes != 400 || res.Key != "job-a/manifest.json" {
		t.Errorf("verdict %+v, want verified, 2 files, 400 bytes", res)
	}
	if a := res.Artifacts(); !a.Verified || a.Files != 2 || a.Manifest != "job-a/manifest.json" {
		t.Errorf("as the binding's artifacts: %+v", a)
	}

	// An entry replaced since (its pending version differs): not verified, named.
	e.mustPut("job-a/ckpt/a.pt", data(300, 9))
	res, found, err = recheck.StoredManifest(ctx, "job-a", 0)
	if err != nil || !found || res.Verified || len(res.Missing) != 1 || res.Missing[0] != "ckpt/a.pt" {
		t.Errorf("after ckpt/a.pt changed: found %v, err %v, verdict %+v; want unverified naming ckpt/a.pt", found, err, res)
	}

	// No manifest stored for a node: not found, no error.
	if _, found, err := recheck.StoredManifest(ctx, "job-a", 3); found || err != nil {
		t.Errorf("node 3 without a manifest: found %v, err %v", found, err)
	}
}
