package endpoint

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/upload"
)

// manifestOf is job's manifest listing n files (none of them stored),
// written by node 0's registered pod.
func manifestOf(job string, n int) []byte { return storetest.ManifestOf(job, testPod, n) }

func TestManifestOverEntryCapIsRefused(t *testing.T) {
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()})
	body := manifestOf("job-a", upload.MaxManifestEntries+1)
	resp := e.raw(http.MethodPut, "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(body), int64(len(body)), nil)
	if se := wantError(t, resp, http.StatusBadRequest, "MalformedManifest"); !strings.Contains(se.Message, fmt.Sprint(upload.MaxManifestEntries)) {
		t.Errorf("message %q does not name the cap", se.Message)
	}
	e.wantAbsent("job-a/manifest.json")
	if n := len(e.manifests); n != 1 || !strings.Contains(e.manifests[0].Err, "more than") {
		t.Errorf("OnManifest: %+v", e.manifests)
	}
}

// TestManifestPutsPerJobAreLimited holds MaxManifestPutsPerJob manifest
// PUTs of one job open (one reading its body slowly, the other waiting for
// the key's lock): the next is answered 503 SlowDown with Retry-After at
// once, another job's goes on, and the held ones complete.
func TestManifestPutsPerJobAreLimited(t *testing.T) {
	e := newEnv(t, fsstore.FSBackend{Root: t.TempDir()})
	body := manifestOf("job-a", 3)
	var wg sync.WaitGroup
	writers := make([]*io.PipeWriter, MaxManifestPutsPerJob)
	codes := make([]int, MaxManifestPutsPerJob)
	for i := range writers {
		pr, pw := io.Pipe()
		writers[i] = pw
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/tether-artifacts/job-a/manifest.json", pr)
		req.ContentLength = int64(len(body))
		req.Header.Set(names.HeaderArtifactToken, tokenA)
		req.Header.Set(names.HeaderArtifactPodUID, testPod)
		wg.Go(func() {
			resp, err := (&http.Client{Transport: e.transport()}).Do(req)
			if err != nil {
				t.Errorf("held PUT %d: %v", i, err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	// The first one's body starts (it holds the lock, the other waits).
	go func() { _, _ = writers[0].Write(body[:10]) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.h.manifests.mu.Lock()
		n := e.h.manifests.n["ml/job-a-wb"]
		e.h.manifests.mu.Unlock()
		if n == MaxManifestPutsPerJob {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d manifest PUTs in flight, want %d", n, MaxManifestPutsPerJob)
		}
		time.Sleep(5 * time.Millisecond)
	}

	resp := e.raw(http.MethodPut, "/tether-artifacts/job-a/manifest.json", tokenA, bytes.NewReader(body), int64(len(body)), nil)
	wantError(t, resp, http.StatusServiceUnavailable, "SlowDown")
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	other := manifestOf("job-b", 0)
	if resp := e.raw(http.MethodPut, "/tether-artifacts/job-b/manifest.json", tokenB, bytes.NewReader(other), int64(len(other)), nil); resp.StatusCode != http.StatusOK {
		t.Errorf("another job's manifest PUT: %d", resp.StatusCode)
	}

	go func() {
		_, _ = writers[0].Write(body[10:])
		_ = writers[0].Close()
	}()
	go func() {
		_, _ = writers[1].Write(body)
		_ = writers[1].Close()
	}()
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("held PUT %d: %d, want 200", i, c)
		}
	}
	e.h.manifests.mu.Lock()
	defer e.h.manifests.mu.Unlock()
	if len(e.h.manifests.n) != 0 {
		t.Errorf("slots left taken: %v", e.h.manifests.n)
	}
}
