package upload

import (
	"crypto/md5"
	"encoding/hex"
	"testing"
)

// Every legal size fits in S3's parts: at most MaxParts parts, each of
// MinPartSize to MaxPartSize bytes, whatever base part size is set.
func TestPartSizeKeepsAnyLegalFileWithinMultipartLimits(t *testing.T) {
	for _, base := range []int64{0, MinPartSize, 8 << 20, 64 << 20, 1 << 30} {
		for _, size := range []int64{1, 64 << 20, 5 << 30, 5<<30 + 64<<20, 50 << 30, 640 << 30, 1 << 40, MaxObjectSize} {
			p := PartSize(size, base)
			if n := Parts(size, p); n > MaxParts || p < MinPartSize || p > MaxPartSize {
				t.Errorf("size %d, base %d: parts of %d, %d of them", size, base, p, n)
			}
			if base >= MinPartSize && size <= base*MaxParts && p != base {
				t.Errorf("size %d, base %d: the part size was raised to %d although %d parts of the base hold it", size, base, p, MaxParts)
			}
		}
	}
	if got := PartSize(MaxObjectSize, 0); got != 525<<20 {
		t.Errorf("5 TiB in parts of %d, want 525 MiB", got)
	}
}

func TestMultipartETag(t *testing.T) {
	if !IsMultipartETag("0123456789abcdef0123456789abcdef-3") || IsMultipartETag("0123456789abcdef0123456789abcdef") ||
		IsMultipartETag("0123456789abcdef0123456789abcdef-0") || IsMultipartETag("0123456789abcdef0123456789abcdef-10001") {
		t.Fatal("IsMultipartETag")
	}
	// S3's ETag of two parts: the MD5 of their binary MD5s, then -2.
	a, b := md5.Sum([]byte("part one")), md5.Sum([]byte("part two"))
	whole := md5.Sum(append(a[:], b[:]...))
	if got, want := MultipartETag([][]byte{a[:], b[:]}), hex.EncodeToString(whole[:])+"-2"; got != want {
		t.Fatalf("MultipartETag %s, want %s", got, want)
	}
}
