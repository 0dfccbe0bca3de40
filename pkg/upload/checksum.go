package upload

import (
	"encoding/base64"
	"hash"

	"github.com/minio/crc64nvme"
)

// ChecksumHeader carries an object's CRC-64/NVME on a PUT (request header
// or aws-chunked trailer) and on HEAD and PUT answers (S3's flexible
// checksum). Every PUT Tether makes sends it: a store whose ETag is not the
// MD5 (SSE-KMS, SSE-C) is verified by the checksum it stored and returns.
const ChecksumHeader = "X-Amz-Checksum-Crc64nvme"

// NewCRC64NVME is the hash of ChecksumHeader (the CPU's carry-less
// multiply where there is one: about 100 times the MD5's speed).
func NewCRC64NVME() hash.Hash64 { return crc64nvme.New() }

// EncodeChecksum is a checksum's S3 form (base64 of its bytes).
func EncodeChecksum(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }

// CRC64NVMEOf is b's CRC-64/NVME in S3's form.
func CRC64NVMEOf(b []byte) string {
	h := crc64nvme.New()
	_, _ = h.Write(b)
	return EncodeChecksum(h.Sum(nil))
}
