package verify

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// FuzzParseManifest: a manifest is refused with an error, or every entry
// is a key objects.CheckKey accepts, unique, with a size in range and an MD5; and it
// survives a re-encode unchanged. Scan decides as Parse does.
func FuzzParseManifest(f *testing.F) {
	for _, seed := range []string{
		`{"version":"v1","jobID":"job","files":[{"path":"a.txt","size":3,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v1","jobID":"job","files":[]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"},{"path":"a","size":1,"md5":"900150983cd24fb0d6963f7d28e17f72"}]}`,
		`{"version":"v1","jobID":"job","files":[{"path":"../x","size":1,"md5":"x"}]}`,
		`{"version":"v2","jobID":"job"}`, `{"version":"v1","jobID":"job"} {}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed), "job")
	}
	f.Fuzz(func(t *testing.T, b []byte, jobID string) {
		m, err := Parse(b, jobID)
		// Scan (the endpoint's, which keeps no entries) agrees, and
		// Entries reads again what Parse kept.
		sm, serr := scanned(t, b, jobID)
		if (err == nil) != (serr == nil) || err != nil && err.Error() != serr.Error() || err == nil && !reflect.DeepEqual(sm, m) {
			t.Fatalf("Parse: %+v, %v; Scan: %+v, %v", m, err, sm, serr)
		}
		if err != nil {
			if err.Error() == "" {
				t.Fatal("refusal without a message")
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range m.Files {
			if _, _, ke := objects.CheckKey(jobID + "/" + e.Path); ke != nil || seen[e.Path] || e.Path == upload.ManifestName ||
				e.Size < 0 || e.Size > upload.MaxObjectSize || len(e.MD5) != 32 || !objects.IsLowerHex(e.MD5) {
				t.Fatalf("accepted entry %+v", e)
			}
			seen[e.Path] = true
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(out, jobID)
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-encoded manifest %s: %v, %+v != %+v", out, err, again, m)
		}
	})
}
