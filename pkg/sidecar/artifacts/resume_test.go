package artifacts

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// cutBody ends the first PUT of a body after limit bytes, as a sidecar
// killed mid-file or a connection lost does; it counts every PUT body byte.
// skip PUTs pass whole before the one that is cut.
type cutBody struct {
	next  http.RoundTripper
	limit int64
	skip  atomic.Int64
	cut   atomic.Bool
	sent  atomic.Int64
}

func (c *cutBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && r.Body != nil {
		var body io.Reader = r.Body
		if !c.cut.Load() && c.skip.Add(-1) < 0 && c.cut.CompareAndSwap(false, true) {
			body = &failAfter{r: r.Body, n: c.limit}
		}
		r.Body = io.NopCloser(&countReader{r: body, n: &c.sent})
	}
	return c.next.RoundTrip(r)
}

type failAfter struct {
	r io.Reader
	n int64
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection cut by the test")
	}
	if int64(len(p)) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= int64(n)
	return n, err
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// A large file whose PUT was cut after its first parts were stored is
// resumed by the next Uploader (a restarted sidecar): only the rest is sent,
// and the object is the file, verified by its checksum. A file rewritten
// since is sent whole.
func TestUploaderMultipartResume(t *testing.T) { eachS3(t, testUploaderMultipartResume) }

func testUploaderMultipartResume(t *testing.T, env *s3env) {
	const part = upload.MinPartSize
	jobID := newJobID()
	d := newDirectServer(t, env, jobID)
	caps, err := d.s3.Probe(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := caps.Choose()
	if err != nil || !ch.Multipart {
		t.Fatalf("the store cannot verify objects stored in parts: %+v %v", ch, err)
	}
	d.s3.Use(ch)
	d.h.Store = store.New(d.s3, store.Options{Multipart: store.MultipartOptions{Threshold: part, PartSize: part}})
	cut := &cutBody{limit: part + part/2}
	newU := func() *Uploader {
		u, _ := newTestUploader(t, env, jobID, uploaderOpts{url: d.url, caPEM: d.caPEM, wrap: func(rt http.RoundTripper) http.RoundTripper {
			cut.next = rt
			return cut
		}, cfg: func(c *UploaderConfig) {
			c.DirectMinSize, c.ResumeMinSize, c.MaxAttempts = -1, part, 1
		}})
		return u
	}
	dir := t.TempDir()
	big := randBytes(t, int(3*part+77))
	writeFile(t, dir, "ckpt/model.bin", big)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	if _, err := newU().UploadFile(t.Context(), root, "ckpt/model.bin"); err == nil {
		t.Fatal("the cut PUT verified the file")
	}
	d.waitHandled(t)
	before := cut.sent.Load()
	res, err := newU().UploadFile(t.Context(), root, "ckpt/model.bin")
	if err != nil || res.How != Uploaded || res.MD5 != md5hex(big) || res.CRC64NVME != upload.CRC64NVMEOf(big) {
		t.Fatalf("resumed upload: %+v %v", res, err)
	}
	if res.Resumed != part {
		t.Fatalf("resumed after %d bytes, want the stored part's %d", res.Resumed, part)
	}
	// The body is aws-chunked: its framing adds a few hundred bytes.
	if sent, rest := cut.sent.Load()-before, int64(len(big))-part; sent < rest || sent > rest+64<<10 {
		t.Fatalf("the resumed upload sent %d bytes, want the %d after the stored part (and its framing)", sent, rest)
	}
	info, err := d.s3.Head(t.Context(), jobID+"/ckpt/model.bin")
	if err != nil || info.Size != int64(len(big)) || info.CRC64NVME != upload.CRC64NVMEOf(big) || !upload.IsMultipartETag(info.ETag) {
		t.Fatalf("stored: %+v %v", info, err)
	}
	if got := env.get(t, jobID+"/ckpt/model.bin"); md5hex(got) != md5hex(big) {
		t.Fatal("the stored object is not the file")
	}
	// A restarted sidecar finds the stored object is the file (by its
	// checksum: its ETag is not an MD5) and sends nothing.
	before = cut.sent.Load()
	if res, err := newU().UploadFile(t.Context(), root, "ckpt/model.bin"); err != nil || res.How != AlreadyPresent || cut.sent.Load() != before {
		t.Fatalf("present object: %+v %v, sent %d", res, err, cut.sent.Load()-before)
	}

	// Cut again on a new file, then rewrite its first bytes: sent whole.
	cut.cut.Store(false)
	other := randBytes(t, len(big))
	writeFile(t, dir, "ckpt/opt.bin", other)
	if _, err := newU().UploadFile(t.Context(), root, "ckpt/opt.bin"); err == nil {
		t.Fatal("the cut PUT verified the file")
	}
	d.waitHandled(t)
	rewritten := randBytes(t, len(big))
	writeFile(t, dir, "ckpt/opt.bin", rewritten)
	res, err = newU().UploadFile(t.Context(), root, "ckpt/opt.bin")
	if err != nil || res.Resumed != 0 || res.CRC64NVME != upload.CRC64NVMEOf(rewritten) {
		t.Fatalf("rewritten file: %+v %v", res, err)
	}
	if got := env.get(t, jobID+"/ckpt/opt.bin"); md5hex(got) != md5hex(rewritten) {
		t.Fatal("the stored object is not the rewritten file")
	}
}

// waitHandled waits until the endpoint finished every request it saw (a
// cut PUT's handler goes on after the client gave up).
func (d *directServer) waitHandled(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); d.handled.Load() < int64(len(d.seen())); {
		if time.Now().After(deadline) {
			t.Fatal("the endpoint did not finish the cut PUT")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
