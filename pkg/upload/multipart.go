package upload

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// S3's multipart limits: parts of MinPartSize to MaxPartSize bytes (the last
// may be smaller), at most MaxParts of them.
const (
	MinPartSize int64 = 5 << 20
	MaxPartSize int64 = 5 << 30
	MaxParts          = 10_000
	// DefaultMultipartThreshold is the size from which the binding server
	// stores a body as a multipart upload: below it, one PUT as always.
	DefaultMultipartThreshold int64 = 64 << 20
	// DefaultPartSize is the part size of a file small enough that
	// MaxParts parts of it hold the file.
	DefaultPartSize int64 = 64 << 20
)

// PartSize is the part size of a size-byte object stored in parts of at
// least base bytes (DefaultPartSize if 0): base, raised in whole MiB until
// MaxParts parts hold the object, so a legal object never needs more than
// MaxParts parts. base below MinPartSize is raised to it.
func PartSize(size, base int64) int64 {
	if base <= 0 {
		base = DefaultPartSize
	}
	base = max(base, MinPartSize)
	if need := (size + MaxParts - 1) / MaxParts; need > base {
		const mib = 1 << 20
		base = (need + mib - 1) / mib * mib
	}
	return min(base, MaxPartSize)
}

// Parts is how many parts of partSize bytes hold size bytes (one for an
// empty object).
func Parts(size, partSize int64) int {
	if size <= 0 {
		return 1
	}
	return int((size + partSize - 1) / partSize)
}

// MultipartETag is the ETag S3 gives an object completed from parts whose
// MD5s are partMD5s: the MD5 of the concatenated binary MD5s, then "-" and
// the number of parts. It is not the object's MD5 and never compared with
// one.
func MultipartETag(partMD5s [][]byte) string {
	h := md5.New()
	for _, m := range partMD5s {
		h.Write(m)
	}
	return hex.EncodeToString(h.Sum(nil)) + "-" + strconv.Itoa(len(partMD5s))
}

// IsMultipartETag says whether etag (lowercase, unquoted) is the ETag of an
// object stored in parts ("<hex>-<parts>"): such an ETag is not the
// object's MD5.
func IsMultipartETag(etag string) bool {
	i := strings.LastIndexByte(etag, '-')
	if i != 32 {
		return false
	}
	n, err := strconv.Atoi(etag[i+1:])
	return err == nil && n >= 1 && n <= MaxParts
}

// CheckObjectSize refuses a size S3 cannot store.
func CheckObjectSize(size int64) error {
	if size < 0 || size > MaxObjectSize {
		return fmt.Errorf("the object is %d bytes; S3 stores objects of 0 to %d bytes (5 TiB)", size, MaxObjectSize)
	}
	return nil
}
