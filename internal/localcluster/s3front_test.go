package localcluster

import "testing"

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
