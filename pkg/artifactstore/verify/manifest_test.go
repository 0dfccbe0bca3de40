package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/upload"
)

// manifestOf is job's manifest listing n files (none of them stored).
func manifestOf(job string, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"version":%q,"jobID":%q,"podUID":%q,"files":[`, upload.ManifestVersion, job, testPod)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"path":"f%d","size":1,"md5":"%032x"}`, i, i)
	}
	b.WriteString("]}")
	return b.Bytes()
}

func TestDecodeManifestEntryCap(t *testing.T) {
	m, err := parseManifest(manifestOf("job", upload.MaxManifestEntries), "job")
	if err != nil || len(m.Files) != upload.MaxManifestEntries {
		t.Fatalf("a manifest of %d files (the cap): %v", upload.MaxManifestEntries, err)
	}
	_, err = parseManifest(manifestOf("job", upload.MaxManifestEntries+1), "job")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(upload.MaxManifestEntries)) || !strings.Contains(err.Error(), "tether.dev/exclude") {
		t.Fatalf("a manifest of %d files: %v, want a refusal naming the cap and what to do", upload.MaxManifestEntries+1, err)
	}
}

// TestDecodeManifestMatchesEncodingJSON: the streaming decoder reads
// fields as json.Unmarshal does (case folded, the last repeated key wins,
// null files, unknown fields of any shape skipped).
func TestDecodeManifestMatchesEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{"Version":"v1","JOBID":"job","files":[{"PATH":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72","x":[1,{"y":2}]}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"}],"files":[]}`,
		`{"version":"v1","jobID":"other","jobID":"job","files":null,"extra":{"deep":[[[]]]},"podUID":"p"}`,
		` {"version":"v1","jobID":"job"} `,
	} {
		got, err := parseManifest([]byte(doc), "job")
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		var want upload.Manifest
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%#v", *got) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s:\n got %#v\nwant %#v", doc, *got, want)
		}
	}
	for _, doc := range []string{`{"version":"v1","jobID":"job","files":{}}`, `{"version":"v1","jobID":"job","files":[1]}`,
		`{"version":"v1","jobID":"job","files":[]`, `{"version":"v1","jobID":"job",}`, `{"version":1,"jobID":"job"}`} {
		if _, err := parseManifest([]byte(doc), "job"); err == nil {
			t.Errorf("%s accepted", doc)
		}
	}
}

func TestManifestOverEntryCapIsRefused(t *testing.T) {
	e := newEnv(t, FSBackend{Root: t.TempDir()})
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
	e := newEnv(t, FSBackend{Root: t.TempDir()})
	body := manifestOf("job-a", 3)
	var wg sync.WaitGroup
	writers := make([]*io.PipeWriter, MaxManifestPutsPerJob)
	codes := make([]int, MaxManifestPutsPerJob)
	for i := range writers {
		pr, pw := io.Pipe()
		writers[i] = pw
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/tether-artifacts/job-a/manifest.json", pr)
		req.ContentLength = int64(len(body))
		req.Header.Set(upload.TokenHeader, tokenA)
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
