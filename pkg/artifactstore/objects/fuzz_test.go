package objects

import (
	"net/http"
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
		jobID, path, e := CheckKey(key)
		if e != nil {
			if (e.Status != http.StatusBadRequest && e.Status != http.StatusForbidden) || e.Code == "" || e.Message == "" {
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
