package store

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tether-dev/tether/pkg/upload"
)

// FuzzCheckKey: a key is either refused with a 400/403 and a message, or
// split into a job id and a clean relative path that rebuild it exactly,
// stay out of the reserved directory and leave room for the pending infix
// within S3's 1024 bytes.
func FuzzCheckKey(f *testing.F) {
	for _, seed := range []string{"job/a.txt", "job/ckpt/step 100.pt", "job/-odd/ünïcode", "job", "/job/a", "job//a", "job/./a",
		"job/../other/a", "job/.tether/pending/a", "job/a/", "", "job/\x00", "job/\xff", strings.Repeat("a", 1100)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		jobID, path, e := checkKey(key)
		if e != nil {
			if (e.status != http.StatusBadRequest && e.status != http.StatusForbidden) || e.code == "" || e.message == "" {
				t.Fatalf("refusal of %q without a clear status, code and message: %+v", key, e)
			}
			return
		}
		switch {
		case jobID+"/"+path != key:
			t.Fatalf("%q split into %q and %q", key, jobID, path)
		case len(key) > upload.MaxKeyLength || len(PendingKey(key)) > 1024:
			t.Fatalf("%q accepted at %d bytes (pending key %d)", key, len(key), len(PendingKey(key)))
		case !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0:
			t.Fatalf("%q accepted with invalid UTF-8 or a NUL", key)
		}
		for i, seg := range strings.Split(key, "/") {
			if seg == "" || seg == "." || seg == ".." || i == 1 && seg == upload.ReservedDir {
				t.Fatalf("%q accepted with segment %d %q", key, i, seg)
			}
		}
	})
}

// FuzzParseManifest: a manifest is refused with an error, or every entry
// is a key checkKey accepts, unique, with a size in range and an MD5; and it
// survives a re-encode unchanged.
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
		m, err := parseManifest(b, jobID)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("refusal without a message")
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range m.Files {
			if _, _, ke := checkKey(jobID + "/" + e.Path); ke != nil || seen[e.Path] || e.Path == upload.ManifestName ||
				e.Size < 0 || e.Size > upload.MaxObjectSize || len(e.MD5) != 32 || !isLowerHex(e.MD5) {
				t.Fatalf("accepted entry %+v", e)
			}
			seen[e.Path] = true
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseManifest(out, jobID)
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-encoded manifest %s: %v, %+v != %+v", out, err, again, m)
		}
	})
}
