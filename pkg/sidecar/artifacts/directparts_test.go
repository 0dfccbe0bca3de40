package artifacts

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/upload"
)

// A file of at least the threshold goes straight to the store in parts:
// the endpoint sees only the authorize and the commit, the store one PUT
// per part (never the token), and the object completed from the parts is
// the file; nothing is copied and no record or upload is left. A store
// connection cut mid-file leaves stored parts the next Uploader skips
// (reading them, not sending them); a file rewritten since is uploaded
// anew.
func TestUploaderDirectPartsMultipart(t *testing.T) { eachS3(t, testUploaderDirectParts) }

func testUploaderDirectParts(t *testing.T, env *s3env) {
	const part = upload.MinPartSize
	jobID := newJobID()
	d := newDirectServer(t, env, jobID)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.caPEM)
	caps, err := d.s3.Probe(t.Context(), &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := caps.Choose()
	if err != nil || !ch.Multipart || !ch.Direct {
		t.Fatalf("the store cannot take direct uploads in parts: %+v %v", ch, err)
	}
	d.s3.Use(ch)
	d.h.Store = store.New(d.s3, store.Options{Multipart: store.MultipartOptions{Threshold: part, PartSize: part}})
	sp := &storePuts{}
	// The second part's PUT is cut half-way.
	cut := &cutBody{limit: part / 2}
	cut.cut.Store(true) // not the first upload
	newU := func(attempts int) *Uploader {
		u, _ := newTestUploader(t, env, jobID, uploaderOpts{url: d.url, caPEM: d.caPEM, cfg: func(c *UploaderConfig) {
			c.MaxAttempts = attempts
			c.WrapStoreTransport = func(rt http.RoundTripper) http.RoundTripper {
				sp.next = rt
				cut.next = sp
				return cut
			}
		}})
		return u
	}
	dir := t.TempDir()
	big := randBytes(t, int(3*part+77))
	writeFile(t, dir, "ckpt/a.bin", big)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	res, err := newU(1).UploadFile(t.Context(), root, "ckpt/a.bin")
	if err != nil || res.How != Uploaded || res.MD5 != md5hex(big) || res.CRC64NVME != upload.CRC64NVMEOf(big) {
		t.Fatalf("upload in parts: %+v %v", res, err)
	}
	want := []string{"HEAD /" + upload.Bucket + "/" + jobID + "/ckpt/a.bin", "POST " + upload.PathAuthorize, "POST " + upload.PathCommit}
	if got := d.seen(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the endpoint saw %q, want %q (the body must not go through it)", got, want)
	}
	if len(sp.keys) != 4 || sp.leak {
		t.Fatalf("store PUTs %q (token sent: %v), want one per part without the token", sp.keys, sp.leak)
	}
	d.wantStored(t, jobID+"/ckpt/a.bin", big)

	// Cut mid-file: the next Uploader finds the first part stored.
	writeFile(t, dir, "ckpt/b.bin", big)
	cut.skip.Store(1)
	cut.cut.Store(false)
	if _, err := newU(1).UploadFile(t.Context(), root, "ckpt/b.bin"); err == nil {
		t.Fatal("the cut upload verified the file")
	}
	before := cut.sent.Load()
	res, err = newU(1).UploadFile(t.Context(), root, "ckpt/b.bin")
	if err != nil || res.Resumed != part {
		t.Fatalf("resumed upload: %+v %v (want %d bytes found stored)", res, err, part)
	}
	if sent := cut.sent.Load() - before; sent != int64(len(big))-part {
		t.Fatalf("the resumed upload sent %d bytes to the store, want %d", sent, int64(len(big))-part)
	}
	d.wantStored(t, jobID+"/ckpt/b.bin", big)

	// Cut, then rewritten: the stored part is not the file's; the next
	// attempt asks for a new upload.
	writeFile(t, dir, "ckpt/c.bin", big)
	cut.skip.Store(1)
	cut.cut.Store(false)
	if _, err := newU(1).UploadFile(t.Context(), root, "ckpt/c.bin"); err == nil {
		t.Fatal("the cut upload verified the file")
	}
	other := randBytes(t, len(big))
	writeFile(t, dir, "ckpt/c.bin", other)
	res, err = newU(3).UploadFile(t.Context(), root, "ckpt/c.bin")
	if err != nil || res.Resumed != 0 || res.CRC64NVME != upload.CRC64NVMEOf(other) {
		t.Fatalf("rewritten file: %+v %v", res, err)
	}
	d.wantStored(t, jobID+"/ckpt/c.bin", other)
	ups, err := d.s3.ListMultipartUploads(t.Context(), jobID+"/")
	if err != nil || len(ups) != 0 {
		t.Fatalf("open uploads left: %+v %v", ups, err)
	}
	if keys, err := d.s3.List(t.Context(), objects.JobUploadsPrefix(jobID)); err != nil || len(keys) != 0 {
		t.Fatalf("records or uploads left: %q %v", keys, err)
	}
}

// wantStored checks key holds b, stored in parts (its CRC-64/NVME is b's).
func (d *directServer) wantStored(t *testing.T, key string, b []byte) {
	t.Helper()
	info, err := d.s3.Head(t.Context(), key)
	if err != nil || info.Size != int64(len(b)) || info.CRC64NVME != upload.CRC64NVMEOf(b) || !upload.IsMultipartETag(info.ETag) {
		t.Fatalf("%s: stored %+v %v", key, info, err)
	}
}
