package fsstore

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/tether-dev/tether/pkg/upload"
)

// crcOf is b's CRC-64/NVME computed over its bytes.
func crcOf(b []byte) uint64 {
	h := upload.NewCRC64NVME()
	_, _ = h.Write(b)
	return h.Sum64()
}

// TestMultipartCRCJoin: the CRC joined from pieces' CRCs is the one
// computed over their concatenation, for pieces of every kind of length
// (empty, one byte, odd, 5 MiB, repeated lengths from the cache).
func TestMultipartCRCJoin(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	piece := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, lengths := range [][]int{
		{0}, {1}, {7, 0, 13}, {1, 1, 1, 1}, {1000, 1000, 1000, 17},
		{5 << 20, 5 << 20, 3}, {0, 5<<20 + 1, 0, 1},
	} {
		var pieces [][]byte
		var j crcJoin
		for _, n := range lengths {
			p := piece(n)
			pieces = append(pieces, p)
			j.add(crcOf(p), int64(n))
		}
		whole := bytes.Join(pieces, nil)
		if want := crcOf(whole); j.crc != want || j.size != int64(len(whole)) {
			t.Errorf("pieces of %v: joined CRC %016x (%d bytes), want %016x (%d bytes)", lengths, j.crc, j.size, want, len(whole))
		}
	}
	if (&crcJoin{}).crc != crcOf(nil) {
		t.Error("the CRC of nothing is not the empty join's")
	}
}
