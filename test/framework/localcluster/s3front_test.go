package localcluster

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
