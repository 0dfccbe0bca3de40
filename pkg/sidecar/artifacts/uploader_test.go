package artifacts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

type tLogWriter struct{ t *testing.T }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestUploadRoundTrip(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	files := map[string][]byte{
		"empty":                   {},
		"small.txt":               []byte("hello, artifacts\n"),
		"ckpt/step-100.pt":        randBytes(t, 5<<20+123),
		"with space/and  two.bin": randBytes(t, 1000),
		"ünïcødé/файл-模型.safetensors": randBytes(t, 2048),
		"-leading-dash":                 []byte("-"),
		"odd/#hash?q=1&x=%20+plus;semi": []byte("odd"),
	}
	sums := map[string]string{}
	for rel, data := range files {
		sums[rel] = writeFile(t, dir, rel, data)
	}
	u, c := newTestUploader(t, env, job, uploaderOpts{})
	sc := newTestScanner(t, dir, nil)
	for rel, data := range files {
		res, err := u.UploadFile(context.Background(), sc.Root(), rel)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		if res.How != Uploaded || res.MD5 != sums[rel] || res.Size != int64(len(data)) || res.Attempts != 1 {
			t.Errorf("%s: result %+v", rel, res)
		}
		info, ok := env.stat(t, job+"/"+rel)
		if !ok || info.Size != int64(len(data)) || trimETag(info.ETag) != sums[rel] {
			t.Errorf("%s: stored %v %+v, want size %d etag %s", rel, ok, info, len(data), sums[rel])
		}
		if got := env.get(t, job+"/"+rel); md5hex(got) != sums[rel] {
			t.Errorf("%s: stored content differs", rel)
		}
	}
	if c.bad != 0 {
		t.Errorf("%d requests without the token header", c.bad)
	}
	if len(c.puts) != len(files) {
		t.Errorf("PUTs %q, want one per file", c.puts)
	}
	var total int64
	for _, d := range files {
		total += int64(len(d))
	}
	if got := u.VerifiedBytes(); got != total {
		t.Errorf("VerifiedBytes = %d, want %d", got, total)
	}

	// Unchanged since verified: neither read nor sent (no request at all).
	before := len(c.putKeys())
	heads := c.heads
	res, err := u.UploadFile(context.Background(), sc.Root(), "ckpt/step-100.pt")
	if err != nil || res.How != Unchanged {
		t.Errorf("second upload: %+v, %v", res, err)
	}
	if len(c.putKeys()) != before || c.heads != heads {
		t.Error("an unchanged verified file caused a request")
	}
}

func TestUploadRefusesWhatIsNotARegularFileInside(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, outside, "secret", []byte("secret"))
	dir := t.TempDir()
	writeFile(t, dir, "real", []byte("real"))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-link")))
	must(t, os.Symlink("real", filepath.Join(dir, "rel-link")))
	must(t, os.Symlink(outside, filepath.Join(dir, "dir-link")))
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))

	// No server: every refusal happens before any request.
	u, c := newTestUploader(t, nil, "job-x", uploaderOpts{url: "https://127.0.0.1:1", caPEM: []byte("-")})
	sc := newTestScanner(t, dir, nil)
	for _, rel := range []string{"abs-link", "rel-link", "dir-link/secret", "../" + filepath.Base(outside) + "/secret", "sub", "sub/../real", "./real", "/etc/passwd", ""} {
		_, err := u.UploadFile(context.Background(), sc.Root(), rel)
		var fe *FileError
		if !errors.As(err, &fe) || !fe.Permanent || fe.Attempts > 1 {
			t.Errorf("%q: err = %v, want a permanent refusal", rel, err)
		}
	}
	if len(c.putKeys()) != 0 || c.heads != 0 {
		t.Errorf("requests were made: %q, %d HEADs", c.putKeys(), c.heads)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Every transient fault is retried and ends verified; the flipped byte is
// never taken as verified: the store computes its ETag over what it got.
func TestUploadRetriesTransientFaults(t *testing.T) {
	env := needS3(t)
	for _, f := range []fault{resetBody, slowDown, truncate, flipByte} {
		t.Run(f.String(), func(t *testing.T) {
			job := newJobID()
			dir := t.TempDir()
			data := randBytes(t, 3<<20+7)
			sum := writeFile(t, dir, "model.bin", data)
			p := newFaultProxy(t, env, func(key string, n int) fault {
				if n <= 2 {
					return f
				}
				return pass
			})
			u, c := newTestUploader(t, env, job, uploaderOpts{url: p.url(), caPEM: p.caPEM()})
			sc := newTestScanner(t, dir, nil)
			res, err := u.UploadFile(context.Background(), sc.Root(), "model.bin")
			if err != nil {
				t.Fatalf("not verified: %v (faults %q)", err, p.injected())
			}
			if res.MD5 != sum || res.Attempts != 3 || res.How != Uploaded {
				t.Errorf("result %+v, want MD5 %s after 3 attempts", res, sum)
			}
			if n := len(c.putKeys()); n != 3 {
				t.Errorf("%d PUTs, want 3", n)
			}
			if info, ok := env.stat(t, job+"/model.bin"); !ok || trimETag(info.ETag) != sum || info.Size != int64(len(data)) {
				t.Errorf("stored %+v", info)
			}
		})
	}
}

// A fault on every attempt: the file is reported with the error and what to
// do, never verified.
func TestUploadGivesUpAfterTheBound(t *testing.T) {
	env := needS3(t)
	for _, f := range []fault{resetBody, slowDown, flipByte} {
		t.Run(f.String(), func(t *testing.T) {
			job := newJobID()
			dir := t.TempDir()
			writeFile(t, dir, "model.bin", randBytes(t, 1<<20))
			p := newFaultProxy(t, env, func(string, int) fault { return f })
			u, c := newTestUploader(t, env, job, uploaderOpts{url: p.url(), caPEM: p.caPEM(),
				cfg: func(c *UploaderConfig) { c.MaxAttempts = 4 }})
			sc := newTestScanner(t, dir, nil)
			res, err := u.UploadFile(context.Background(), sc.Root(), "model.bin")
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("verified %+v despite a fault on every attempt", res)
			}
			if fe.Attempts != 4 || fe.Permanent || fe.Path != "model.bin" || !strings.Contains(fe.Error(), "TETHER_SERVER_URL") {
				t.Errorf("error %+v: %v", fe, fe)
			}
			// A flipped byte is caught by the ETag, or before by the
			// checksum every PUT carries (400 BadDigest).
			var er minio.ErrorResponse
			if f == flipByte && !errors.Is(err, errETagMismatch) && !(errors.As(err, &er) && er.Code == "BadDigest") {
				t.Errorf("err = %v, want an ETag mismatch or BadDigest", err)
			}
			if len(c.putKeys()) != 4 {
				t.Errorf("%d PUTs, want 4", len(c.putKeys()))
			}
			if _, ok := u.Verified("model.bin", 1<<20, time.Time{}); ok || u.VerifiedBytes() != 0 {
				t.Error("counted as verified")
			}
			t.Logf("reported: %v", err)
		})
	}
}

func TestUploadPermanentRefusalIsNotRetried(t *testing.T) {
	env := needS3(t)
	dir := t.TempDir()
	writeFile(t, dir, "a", []byte("a"))
	p := newFaultProxy(t, env, func(string, int) fault { return forbidden })
	u, c := newTestUploader(t, env, newJobID(), uploaderOpts{url: p.url(), caPEM: p.caPEM()})
	sc := newTestScanner(t, dir, nil)
	_, err := u.UploadFile(context.Background(), sc.Root(), "a")
	var fe *FileError
	if !errors.As(err, &fe) || !fe.Permanent || fe.Attempts != 1 || !strings.Contains(fe.Hint, "binding has finished") {
		t.Fatalf("err = %#v", err)
	}
	if len(c.putKeys()) != 1 {
		t.Errorf("%d PUTs, want 1", len(c.putKeys()))
	}
}

func TestUploadMalformedTokenIsPermanentAndNeverShown(t *testing.T) {
	env := needS3(t)
	dir := t.TempDir()
	writeFile(t, dir, "a", []byte("a"))
	u, c := newTestUploader(t, env, newJobID(), uploaderOpts{})
	must(t, os.WriteFile(u.cfg.TokenFile, []byte("not-a-token-SECRET"), 0o600))
	sc := newTestScanner(t, dir, nil)
	_, err := u.UploadFile(context.Background(), sc.Root(), "a")
	var fe *FileError
	if !errors.As(err, &fe) || !fe.Permanent || fe.Attempts != 1 {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("the error shows the token file's content: %v", err)
	}
	if len(c.putKeys())+c.heads != 0 {
		t.Error("a request went out without a token")
	}
}

// The file changes while it is sent: that attempt is not verified; the next
// one sends the new content.
func TestUploadFileChangedDuringUpload(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	writeFile(t, dir, "log.txt", []byte("first line\n"))
	var once sync.Once
	u, c := newTestUploader(t, env, job, uploaderOpts{wrap: func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut {
				once.Do(func() {
					f, err := os.OpenFile(filepath.Join(dir, "log.txt"), os.O_APPEND|os.O_WRONLY, 0)
					must(t, err)
					_, _ = f.WriteString("second line\n")
					f.Close()
				})
			}
			return rt.RoundTrip(r)
		})
	}})
	sc := newTestScanner(t, dir, nil)
	res, err := u.UploadFile(context.Background(), sc.Root(), "log.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := "first line\nsecond line\n"
	if res.Attempts != 2 || res.Size != int64(len(want)) || res.MD5 != md5hex([]byte(want)) {
		t.Errorf("result %+v, want the new content after 2 attempts", res)
	}
	if got := string(env.get(t, job+"/log.txt")); got != want {
		t.Errorf("stored %q", got)
	}
	if len(c.putKeys()) != 2 {
		t.Errorf("PUTs %q", c.putKeys())
	}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Memory stays flat in the file's size: a 256 MiB file streams.
func TestUploadMemoryIsFlat(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	const size = 256 << 20
	f, err := os.Create(filepath.Join(dir, "big.bin"))
	must(t, err)
	must(t, f.Truncate(size)) // sparse: all zeros
	f.Close()
	u, _ := newTestUploader(t, env, job, uploaderOpts{})
	sc := newTestScanner(t, dir, nil)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	res, err := u.UploadFile(context.Background(), sc.Root(), "big.bin")
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Size != size || res.MD5 != "1f5039e50bd66b290c56684d8550c6c2" { // md5 of 256 MiB of zeros
		t.Errorf("result %+v", res)
	}
	growth := int64(peak.Load()) - int64(base)
	t.Logf("heap in use: base %d MiB, peak growth %.1f MiB", base>>20, float64(growth)/(1<<20))
	if growth > 32<<20 {
		t.Errorf("heap grew by %d MiB while uploading a 256 MiB file", growth>>20)
	}
}

func TestNewUploaderChecksConfig(t *testing.T) {
	ok := UploaderConfig{ServerURL: "https://tether.example:8443", JobID: "job-1", TokenFile: "/t"}
	if _, err := NewUploader(ok); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*UploaderConfig){
		"http":       func(c *UploaderConfig) { c.ServerURL = "http://tether.example:8443" },
		"path":       func(c *UploaderConfig) { c.ServerURL = "https://tether.example:8443/prefix" },
		"no token":   func(c *UploaderConfig) { c.TokenFile = "" },
		"job slash":  func(c *UploaderConfig) { c.JobID = "a/b" },
		"job empty":  func(c *UploaderConfig) { c.JobID = "" },
		"negative":   func(c *UploaderConfig) { c.MaxAttempts = -1 },
		"user info":  func(c *UploaderConfig) { c.ServerURL = "https://u:p@tether.example" },
		"no host":    func(c *UploaderConfig) { c.ServerURL = "https:///x" },
		"job dotdot": func(c *UploaderConfig) { c.JobID = ".." },
	} {
		c := ok
		mod(&c)
		if _, err := NewUploader(c); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}

func TestBackoffIsBoundedFullJitter(t *testing.T) {
	u, err := NewUploader(UploaderConfig{ServerURL: "https://x", JobID: "j", TokenFile: "/t",
		BackoffInitial: 100 * time.Millisecond, BackoffMax: time.Second})
	must(t, err)
	for attempt := 1; attempt < 10; attempt++ {
		capd := min(100*time.Millisecond<<(attempt-1), time.Second)
		for range 200 {
			if d := u.backoffAfter(attempt); d <= 0 || d > capd {
				t.Fatalf("attempt %d: %v outside (0, %v]", attempt, d, capd)
			}
		}
	}
}

func ExampleFileError() {
	err := &FileError{Path: "ckpt/huge.bin", Permanent: true, Err: TooLargeError{Path: "ckpt/huge.bin", Size: 6 << 40},
		Hint: TooLargeError{Path: "ckpt/huge.bin"}.hint()}
	fmt.Println(err)
	// Output: "ckpt/huge.bin": not uploaded: its size 6597069766656 bytes (6 TiB) is over S3's object limit of 5 TiB (upload.MaxObjectSize); it is never uploaded and the job's artifacts are incomplete: split it, or exclude it with the tether.dev/exclude annotation (e.g. tether.dev/exclude: "ckpt/huge.bin")
}

// The server stored the file but its answer was lost: the next attempt's
// HEAD finds it, the file is read once more and not sent again.
func TestUploadLostAnswerIsResumedByHEAD(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	sum := writeFile(t, dir, "model.bin", randBytes(t, 2<<20))
	p := newFaultProxy(t, env, func(_ string, n int) fault {
		if n == 1 {
			return dropAnswer
		}
		return pass
	})
	u, c := newTestUploader(t, env, job, uploaderOpts{url: p.url(), caPEM: p.caPEM()})
	sc := newTestScanner(t, dir, nil)
	res, err := u.UploadFile(context.Background(), sc.Root(), "model.bin")
	if err != nil {
		t.Fatal(err)
	}
	if res.How != AlreadyPresent || res.MD5 != sum || res.Attempts != 2 {
		t.Errorf("result %+v", res)
	}
	if len(c.putKeys()) != 1 {
		t.Errorf("PUTs %q, want 1", c.putKeys())
	}
}

// A stored object of the same size but other content is replaced.
func TestUploadSameSizeOtherContentIsSent(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	writeFile(t, dir, "w.bin", []byte("version-1"))
	u, _ := newTestUploader(t, env, job, uploaderOpts{})
	sc := newTestScanner(t, dir, nil)
	if _, err := u.UploadFile(context.Background(), sc.Root(), "w.bin"); err != nil {
		t.Fatal(err)
	}
	sum := writeFile(t, dir, "w.bin", []byte("version-2"))
	u2, c2 := newTestUploader(t, env, job, uploaderOpts{})
	res, err := u2.UploadFile(context.Background(), sc.Root(), "w.bin")
	if err != nil || res.How != Uploaded || res.MD5 != sum {
		t.Fatalf("%+v, %v", res, err)
	}
	if got := string(env.get(t, job+"/w.bin")); got != "version-2" || len(c2.putKeys()) != 1 {
		t.Errorf("stored %q after %d PUTs", got, len(c2.putKeys()))
	}
}

// A body the server stops taking ends the attempt after StallTimeout; the
// next attempt goes through.
func TestUploadStalledBodyIsRetried(t *testing.T) {
	env := needS3(t)
	job := newJobID()
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "big.bin"))
	must(t, err)
	must(t, f.Truncate(48<<20)) // more than the loopback socket buffers hold
	f.Close()
	p := newFaultProxy(t, env, func(_ string, n int) fault {
		if n == 1 {
			return stall
		}
		return pass
	})
	u, _ := newTestUploader(t, env, job, uploaderOpts{url: p.url(), caPEM: p.caPEM(),
		cfg: func(c *UploaderConfig) { c.StallTimeout = time.Second }})
	sc := newTestScanner(t, dir, nil)
	start := time.Now()
	res, err := u.UploadFile(context.Background(), sc.Root(), "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	// The first attempt stalls and must be abandoned; on a loaded machine a
	// healthy attempt can also be slow enough to be retried, so only "at
	// least one retry" is asserted, not an exact count.
	if res.Attempts < 2 || res.Size != 48<<20 || res.MD5 == "" {
		t.Errorf("result %+v", res)
	}
	t.Logf("stalled attempt abandoned and retried in %v", time.Since(start))
}

func TestUploadRefusesTooLongKey(t *testing.T) {
	dir := t.TempDir()
	rel := strings.Repeat("d/", 400) + strings.Repeat("x", 210)
	writeFile(t, dir, rel, []byte("x"))
	u, c := newTestUploader(t, nil, "job-x", uploaderOpts{url: "https://127.0.0.1:1", caPEM: []byte("-")})
	_, err := u.UploadFile(context.Background(), newTestScanner(t, dir, nil).Root(), rel)
	var fe *FileError
	if !errors.As(err, &fe) || !fe.Permanent || !strings.Contains(err.Error(), "1008") || len(c.putKeys()) != 0 {
		t.Errorf("err = %v", err)
	}
}
