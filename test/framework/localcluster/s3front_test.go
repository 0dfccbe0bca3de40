package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// The store traffic of a streamed PUT with a trailing checksum counts the
// object's bytes, not its aws-chunked framing, however the reads split it.
func TestChunkCounterCountsChunkDataOnly(t *testing.T) {
	body := "5;chunk-signature=x\r\nhello\r\n3\r\nabc\r\n0\r\nx-amz-checksum-crc64nvme:AAAAAAAAAAA=\r\n\r\n"
	for _, step := range []int{1, 2, 7, len(body)} {
		var c chunkCounter
		var n int64
		for i := 0; i < len(body); i += step {
			n += c.data([]byte(body[i:min(i+step, len(body))]))
		}
		if n != 8 || !c.done {
			t.Errorf("reads of %d bytes: counted %d data bytes (done %v), want 8", step, n, c.done)
		}
	}
}

// A stall holds a PUT mid-body (some bytes passed, no answer) until it
// ends; then the body flows on and the store gets all of it.
func TestS3FrontStallHoldsBodiesMidway(t *testing.T) {
	got := make(chan int64, 1)
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got <- n
	}))
	defer store.Close()
	f, err := newS3Front("127.0.0.1", strings.TrimPrefix(store.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	f.setStalling(true)
	const size = 4 << 20
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, "http://"+f.Addr()+"/bucket/key", bytes.NewReader(make([]byte, size)))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		done <- err
	}()
	for f.snapshot().Stalled == 0 {
		select {
		case err := <-done:
			t.Fatalf("the PUT ended while the store stalled: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if b := f.snapshot().PutBytes; b == 0 || b >= size {
		t.Fatalf("held after %d of %d bytes, want mid-body", b, size)
	}
	select {
	case err := <-done:
		t.Fatalf("the PUT ended while the store stalled: %v", err)
	default:
	}
	f.setStalling(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != size {
		t.Errorf("the store got %d bytes, want %d", n, size)
	}
}

// A body the binding server stores in parts reaches the store as a
// multipart upload of the key: the front counts its parts under the key's
// path (with their bytes, not as the object's size) and the upload it
// started, apart from a whole-object PUT.
func TestS3FrontCountsPartsUnderTheKey(t *testing.T) {
	ctx := context.Background()
	srv, err := s3server.Start(ctx, s3server.Options{Dir: t.TempDir(), AccessKey: "front-access", SecretKey: "front-secret-0123456789"})
	if errors.Is(err, s3server.ErrNoBinary) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if err := srv.MakeBucket(ctx, "artifacts", false); err != nil {
		t.Fatal(err)
	}
	f, err := newS3Front("127.0.0.1", srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: f.Addr(), AccessKey: "front-access", SecretKey: "front-secret-0123456789",
		Region: "us-east-1", Bucket: "artifacts"})
	if err != nil {
		t.Fatal(err)
	}
	const part = upload.MinPartSize
	id, err := b.CreateMultipart(ctx, "job/big.bin")
	if err != nil {
		t.Fatal(err)
	}
	for n, size := range []int64{part, part, 77} {
		if _, err := b.PutPart(ctx, "job/big.bin", id, n+1, bytes.NewReader(make([]byte, size)), size); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Put(ctx, "job/small.bin", strings.NewReader("small"), 5); err != nil {
		t.Fatal(err)
	}
	got := f.snapshot().ByPath
	if big := got["/artifacts/job/big.bin"]; big.Uploads != 1 || big.Puts != 3 || big.Parts != 3 || big.Bytes != 2*part+77 || big.Size != 0 {
		t.Errorf("the key's multipart upload counted as %+v, want 1 upload, 3 PUTs all parts, %d bytes, no object size", big, 2*part+77)
	}
	if small := got["/artifacts/job/small.bin"]; small.Uploads != 0 || small.Puts != 1 || small.Parts != 0 || small.Bytes != 5 || small.Size != 5 {
		t.Errorf("a whole-object PUT counted as %+v, want 1 PUT of 5 bytes, size 5", small)
	}
}
