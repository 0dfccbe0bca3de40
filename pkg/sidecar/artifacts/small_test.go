package artifacts

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// A small file goes in one PUT carrying its Content-MD5, without a HEAD;
// sent again (a restarted sidecar) it is stored again by nobody: the binding
// server's artifact endpoint finds the key, or its pending key, holding that
// MD5 and keeps the object it has. A larger file still starts with a HEAD.
func TestSmallFileResumeStoresNothing(t *testing.T) {
	env := needS3(t) // newTestUploader's helpers; the uploads go to st
	job := newJobID()
	st := newFSStore(t, job)
	dir := t.TempDir()
	small, large := randBytes(t, smallFileSize-1), randBytes(t, smallFileSize)
	writeFile(t, dir, "small.txt", small)
	writeFile(t, dir, "large.bin", large)

	var mu sync.Mutex
	md5s := map[string]string{} // Content-MD5 of each PUT, by path
	uploader := func() (*Uploader, *counter) {
		return newTestUploader(t, env, job, uploaderOpts{url: st.url, caPEM: st.caPEM, wrap: func(rt http.RoundTripper) http.RoundTripper {
			return rtFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPut {
					mu.Lock()
					md5s[filepath.Base(r.URL.Path)] = r.Header.Get("Content-Md5")
					mu.Unlock()
				}
				return rt.RoundTrip(r)
			})
		}})
	}
	root := newTestScanner(t, dir, nil).Root()
	stored := func(key string) os.FileInfo {
		t.Helper()
		fi, err := os.Stat(filepath.Join(st.backend.Root, filepath.FromSlash(key)))
		if err != nil {
			t.Fatalf("stored object %s: %v", key, err)
		}
		return fi
	}
	upload := func(u *Uploader, rel string) Result {
		t.Helper()
		res, err := u.UploadFile(context.Background(), root, rel)
		if err != nil {
			t.Fatalf("UploadFile %s: %v", rel, err)
		}
		return res
	}

	u1, c1 := uploader()
	for _, rel := range []string{"small.txt", "large.bin"} {
		upload(u1, rel)
	}
	if c1.heads != 1 {
		t.Errorf("first upload: %d HEADs, want the large file's only", c1.heads)
	}
	sum := md5.Sum(small)
	if got := md5s["small.txt"]; got != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Errorf("the small file's Content-MD5 is %q", got)
	}
	if md5s["large.bin"] != "" {
		t.Errorf("the large file was sent with a Content-MD5 (%q): it would need a second read", md5s["large.bin"])
	}
	first := stored(job + "/small.txt")

	// A restarted sidecar: the small file is sent and verified, and the
	// object stays the one stored first (a store writes a new file).
	u2, c2 := uploader()
	if res := upload(u2, "small.txt"); res.How != Uploaded || res.MD5 != md5hex(small) {
		t.Errorf("after restart: %+v", res)
	}
	if c2.heads != 0 {
		t.Errorf("after restart: %d HEADs for a small file", c2.heads)
	}
	if again := stored(job + "/small.txt"); !os.SameFile(first, again) {
		t.Error("the unchanged small file was stored again")
	}

	// Changed, it waits under its pending key; sent again unchanged by
	// another restart, the pending object is kept as it is.
	changed := randBytes(t, 100)
	writeFile(t, dir, "small.txt", changed)
	upload(u2, "small.txt")
	pkey := job + "/.tether/pending/small.txt"
	pending := stored(pkey)
	u3, _ := uploader()
	if res := upload(u3, "small.txt"); res.MD5 != md5hex(changed) {
		t.Errorf("changed, after restart: %+v", res)
	}
	if again := stored(pkey); !os.SameFile(pending, again) {
		t.Error("the pending version was stored again")
	}
	if final := stored(job + "/small.txt"); !os.SameFile(first, final) {
		t.Error("the final object changed before promotion")
	}
}
