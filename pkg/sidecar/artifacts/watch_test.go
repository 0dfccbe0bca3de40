//go:build linux

package artifacts

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// eventSyncer runs a Syncer with file events whose rounds never take a file
// on their own (settle time and interval of an hour), so what is uploaded
// was uploaded on its event.
func eventSyncer(t *testing.T, env *s3env, job, dir string, o uploaderOpts, mod func(*ScannerConfig), log *slog.Logger) (*Syncer, *Uploader) {
	t.Helper()
	u, _ := newTestUploader(t, env, job, o)
	sc := newTestScanner(t, dir, func(c *ScannerConfig) {
		c.Settle = time.Hour
		if mod != nil {
			mod(c)
		}
	})
	if log == nil {
		log = testLogger(t)
	}
	s, err := NewSyncer(SyncerConfig{Scanner: sc, Uploader: u, JobID: job, PodUID: "pod-0", Interval: time.Hour, FileEvents: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return s, u
}

func runSyncer(t *testing.T, s *Syncer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// Run's first round has scanned (the watches are in place before it).
	deadline := time.Now().Add(10 * time.Second)
	for s.Mode() != ModeEvents && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStored waits until key holds content.
func waitStored(t *testing.T, env *s3env, key string, content []byte) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if info, ok := env.stat(t, key); ok && trimETag(info.ETag) == md5hex(content) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	info, ok := env.stat(t, key)
	t.Fatalf("%s not stored with the file's content within 15s (stored: %v, %+v)", key, ok, info)
}

func createClosed(t *testing.T, path string, data []byte) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, data, 0o644))
}

func TestFileEventsUploadOnCloseAndRename(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	outside := t.TempDir() // same file system: renamed in
	s, _ := eventSyncer(t, env, job, dir, uploaderOpts{}, func(c *ScannerConfig) { c.Exclude = []string{"**/*.tmp", "scratch/**"} }, nil)
	runSyncer(t, s)
	if s.Mode() != ModeEvents {
		t.Fatalf("mode %q, want %q", s.Mode(), ModeEvents)
	}

	// Closed after writing, at the top and in directories made after the
	// watch started (nested at once, as mkdir -p does).
	top := randBytes(t, 300<<10)
	createClosed(t, filepath.Join(dir, "top.bin"), top)
	waitStored(t, env, job+"/top.bin", top)
	deep := randBytes(t, 5000)
	must(t, os.MkdirAll(filepath.Join(dir, "ckpt-1", "a", "b"), 0o755))
	time.Sleep(50 * time.Millisecond) // the watches of the new directories are added as their creation is read
	createClosed(t, filepath.Join(dir, "ckpt-1", "a", "b", "model.pt"), deep)
	waitStored(t, env, job+"/ckpt-1/a/b/model.pt", deep)

	// Written under an excluded name, then renamed into place: uploaded
	// under its final name.
	final := randBytes(t, 4000)
	createClosed(t, filepath.Join(dir, "final.bin.tmp"), final)
	must(t, os.Rename(filepath.Join(dir, "final.bin.tmp"), filepath.Join(dir, "final.bin")))
	waitStored(t, env, job+"/final.bin", final)

	// A directory written elsewhere and renamed into place: every file in it.
	one, two := randBytes(t, 100), randBytes(t, 200)
	createClosed(t, filepath.Join(outside, "step-2", "one.bin"), one)
	createClosed(t, filepath.Join(outside, "step-2", "sub", "two.bin"), two)
	must(t, os.Rename(filepath.Join(outside, "step-2"), filepath.Join(dir, "step-2")))
	waitStored(t, env, job+"/step-2/one.bin", one)
	waitStored(t, env, job+"/step-2/sub/two.bin", two)
	// ... and watched under its new name.
	three := randBytes(t, 300)
	createClosed(t, filepath.Join(dir, "step-2", "sub", "three.bin"), three)
	waitStored(t, env, job+"/step-2/sub/three.bin", three)

	// A file still open is not taken (its event is its close), nor one in a
	// pruned directory or excluded.
	f, err := os.Create(filepath.Join(dir, "open.bin"))
	must(t, err)
	defer f.Close()
	_, err = f.Write(randBytes(t, 1000))
	must(t, err)
	createClosed(t, filepath.Join(dir, "scratch", "x.bin"), []byte("x"))
	createClosed(t, filepath.Join(dir, "y.tmp"), []byte("y"))
	last := []byte("the last one")
	createClosed(t, filepath.Join(dir, "last.bin"), last)
	waitStored(t, env, job+"/last.bin", last)
	time.Sleep(300 * time.Millisecond)
	for _, k := range []string{"open.bin", "scratch/x.bin", "y.tmp", "final.bin.tmp"} {
		if _, ok := env.stat(t, job+"/"+k); ok {
			t.Errorf("%s was uploaded", k)
		}
	}
	// The open file once closed.
	must(t, f.Close())
	content, err := os.ReadFile(filepath.Join(dir, "open.bin"))
	must(t, err)
	waitStored(t, env, job+"/open.bin", content)
}

// fsStore is the binding server's artifact endpoint (endpoint.Handler) on the
// fs backend, for one writable job.
type fsStore struct {
	url     string
	caPEM   []byte
	backend fsstore.FSBackend
}

func newFSStore(t *testing.T, job string) *fsStore {
	t.Helper()
	s := &fsStore{backend: fsstore.FSBackend{Root: t.TempDir()}}
	h := &endpoint.Handler{Store: store.New(s.backend, store.Options{}), Log: logr.Discard(),
		Authorize: func(context.Context, binding.Token) (endpoint.Job, error) {
			return endpoint.Job{Namespace: "ns", Name: "wb", JobID: job, Writable: true, Pods: map[int]string{0: "pod-0"}}, nil
		}}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return s
}

// A file appended to while it uploads is never stored, nor claimed
// verified, half-way: the upload that read the first version fails, the
// file is not reopened while it is still being written, and its next close
// uploads the whole file. End to end: inotify, the Syncer, the Uploader,
// the binding server's artifact endpoint (fs backend).
func TestFileEventsAppendWhileUploading(t *testing.T) {
	env := needS3(t) // newTestUploader's helpers; the uploads go to st
	job := newJobID()
	st := newFSStore(t, job)
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.bin")
	first, second, third := randBytes(t, 2<<20), randBytes(t, 1<<20), randBytes(t, 1<<20)

	putStarted := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var puts []string // MD5s of the bodies the server was sent in full
	s, u := eventSyncer(t, env, job, dir, uploaderOpts{url: st.url, caPEM: st.caPEM, wrap: func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/ckpt.bin") {
				once.Do(func() {
					close(putStarted)
					<-release // the body has not been read yet
				})
				body := &teeMD5{r: r.Body}
				r.Body = body
				resp, err := rt.RoundTrip(r)
				if err == nil && resp.StatusCode == http.StatusOK {
					mu.Lock()
					puts = append(puts, body.sum())
					mu.Unlock()
				}
				return resp, err
			}
			return rt.RoundTrip(r)
		})
	}}, nil, nil)
	runSyncer(t, s)

	createClosed(t, path, first)
	select {
	case <-putStarted:
	case <-time.After(15 * time.Second):
		t.Fatal("no upload started on close")
	}
	// The trainer opens it again and appends while it uploads, and keeps it open.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.Write(second)
	must(t, err)
	close(release)

	// The upload that started on the first version fails; nothing is
	// stored or verified while the file stays open, however long.
	time.Sleep(time.Second)
	if info, err := st.backend.Head(context.Background(), job+"/ckpt.bin"); !errors.Is(err, upload.ErrNotFound) {
		t.Fatalf("a half-written file was stored: %+v, %v", info, err)
	}
	fi, err := os.Stat(path)
	must(t, err)
	if _, ok := u.Verified("ckpt.bin", fi.Size(), fi.ModTime()); ok {
		t.Fatal("a half-written file is claimed verified")
	}
	if _, ok := u.Verified("ckpt.bin", int64(len(first)), fi.ModTime()); ok {
		t.Fatal("the first version is claimed verified")
	}

	_, err = f.Write(third)
	must(t, err)
	must(t, f.Close())
	whole := slicesConcat(first, second, third)
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := st.backend.Head(context.Background(), job+"/ckpt.bin")
		if err == nil && info.ETag == md5hex(whole) && info.Size == int64(len(whole)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the whole file is not stored after its close: %+v, %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fi, err = os.Stat(path)
	must(t, err)
	// The server stored it before the sidecar read its answer.
	sum, ok := u.Verified("ckpt.bin", fi.Size(), fi.ModTime())
	for !ok && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		sum, ok = u.Verified("ckpt.bin", fi.Size(), fi.ModTime())
	}
	if !ok || sum != md5hex(whole) {
		t.Errorf("verified %v %s, want the whole file %s", ok, sum, md5hex(whole))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range puts {
		if p != md5hex(whole) {
			t.Errorf("the server was answered OK for a body of MD5 %s, not the whole file's", p)
		}
	}
	// And the manifest lists the whole file.
	rep, err := s.Flush(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Verified) != 1 || rep.Verified[0].MD5 != md5hex(whole) || rep.Verified[0].Size != int64(len(whole)) {
		t.Errorf("flush verified %+v", rep.Verified)
	}
	if rep.Manifest != job+"/manifest.json" {
		t.Errorf("manifest %q not verified: %v", rep.Manifest, rep.ManifestErr)
	}
}

func slicesConcat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// teeMD5 hashes what a request body delivered.
type teeMD5 struct {
	r   io.ReadCloser
	buf bytes.Buffer
}

func (t *teeMD5) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.buf.Write(p[:n])
	return n, err
}
func (t *teeMD5) Close() error { return t.r.Close() }

// sum is the MD5 of the body's data (an aws-chunked body without its
// framing and trailer).
func (t *teeMD5) sum() string {
	b := t.buf.Bytes()
	if !chunkedBody(b) {
		return md5hex(b)
	}
	var data []byte
	for {
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		n, err := strconv.ParseInt(string(line), 16, 64)
		if !ok || err != nil || n == 0 || int64(len(rest)) < n+2 {
			return md5hex(data)
		}
		data, b = append(data, rest[:n]...), rest[n+2:]
	}
}

// chunkedBody: b starts like an aws-chunked body ("<hex>\r\n").
func chunkedBody(b []byte) bool {
	line, _, ok := bytes.Cut(b[:min(len(b), 20)], []byte("\r\n"))
	_, err := strconv.ParseInt(string(line), 16, 64)
	return ok && err == nil
}

// syncBuffer is a log destination tests read while the Syncer writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// When the per-uid inotify limits are used up (by other sidecars on the
// node), the sync says so, naming the limit, and the settle rule takes the
// files.
func TestFileEventsUnavailableFallsBackToSettle(t *testing.T) {
	env := needS3(t)
	for _, tc := range []struct {
		name    string
		errno   unix.Errno
		after   int // watches that succeed first
		want    string
		newDirs bool
	}{
		{"no watch at all", unix.ENOSPC, 0, "fs.inotify.max_user_watches", false},
		{"limit hit by a new directory", unix.ENOSPC, 1, "fs.inotify.max_user_watches", true},
		{"no inotify", unix.EINVAL, 0, "file events unavailable", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJobID()
			dir := t.TempDir()
			var logs syncBuffer
			u, _ := newTestUploader(t, env, job, uploaderOpts{})
			sc := newTestScanner(t, dir, func(c *ScannerConfig) { c.Settle = 300 * time.Millisecond })
			s, err := NewSyncer(SyncerConfig{Scanner: sc, Uploader: u, JobID: job, Interval: 50 * time.Millisecond, FileEvents: true,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			must(t, err)
			var mu sync.Mutex
			n := 0
			s.addWatch = func(fd int, p string, mask uint32) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				if n++; n > tc.after {
					return -1, tc.errno
				}
				return unix.InotifyAddWatch(fd, p, mask)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = s.Run(ctx)
			}()
			defer func() {
				cancel()
				<-done
			}()
			data := randBytes(t, 1000)
			rel := "a.bin"
			if tc.newDirs {
				rel = "new/a.bin"
			}
			createClosed(t, filepath.Join(dir, fsPath(rel)), data)
			waitStored(t, env, job+"/"+rel, data)
			deadline := time.Now().Add(5 * time.Second)
			for s.Mode() != ModeSettle && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if s.Mode() != ModeSettle {
				t.Errorf("mode %q", s.Mode())
			}
			if l := logs.String(); !strings.Contains(l, "artifact uploads wait for the settle time") || !strings.Contains(l, tc.want) ||
				!strings.Contains(l, "mode=settle") {
				t.Errorf("the logs do not say the settle rule is in use, and why (%q):\n%s", tc.want, l)
			}
		})
	}
}

// The watcher's queue is bounded: past maxPendingEvents paths it reports
// an overflow (a rescan) and holds nothing.
func TestWatcherQueueIsBounded(t *testing.T) {
	dir := t.TempDir()
	sc := newTestScanner(t, dir, nil)
	w, err := newWatcher(sc, nil)
	must(t, err)
	defer w.Close()
	for i := range maxPendingEvents + 10 {
		createClosed(t, filepath.Join(dir, fmt.Sprintf("f-%05d", i)), nil)
	}
	deadline := time.Now().Add(10 * time.Second)
	var overflow bool
	var paths []string
	for !overflow && time.Now().Before(deadline) {
		<-w.Ready()
		time.Sleep(20 * time.Millisecond)
		var p []string
		p, overflow, err = w.Take()
		must(t, err)
		paths = append(paths, p...)
	}
	if !overflow {
		t.Fatalf("no overflow after %d closes (%d paths taken)", maxPendingEvents+10, len(paths))
	}
	createClosed(t, filepath.Join(dir, "after"), nil)
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		<-w.Ready()
		p, of, err := w.Take()
		must(t, err)
		if of {
			t.Fatal("a second overflow")
		}
		if len(p) == 1 && p[0] == "after" {
			return
		}
	}
	t.Fatal("the watcher does not go on after an overflow")
}
