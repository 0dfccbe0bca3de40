package verify

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/upload"
)

// manifestOf is job "job"'s manifest listing n files (none of them stored).
func manifestOf(n int) []byte { return storetest.ManifestOf("job", "pod-0", n) }

func TestDecodeManifestEntryCap(t *testing.T) {
	m, err := Parse(manifestOf(upload.MaxManifestEntries), "job")
	if err != nil || len(m.Files) != upload.MaxManifestEntries {
		t.Fatalf("a manifest of %d files (the cap): %v", upload.MaxManifestEntries, err)
	}
	_, err = Parse(manifestOf(upload.MaxManifestEntries+1), "job")
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
		got, err := Parse([]byte(doc), "job")
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
		if _, err := Parse([]byte(doc), "job"); err == nil {
			t.Errorf("%s accepted", doc)
		}
	}
}
