package upload

import (
	"encoding"
	"encoding/base64"
	"errors"
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

// ContinueCRC64NVME is a CRC-64/NVME hash that continues from prefix, the
// checksum (S3's form) of the bytes before the ones it will be written: its
// Sum is the checksum of the prefix and what was written. An upload that
// resumes after stored parts goes on from their checksum this way.
func ContinueCRC64NVME(prefix string) (hash.Hash64, error) {
	h := crc64nvme.New()
	if prefix == "" {
		return h, nil
	}
	b, err := base64.StdEncoding.DecodeString(prefix)
	if err != nil || len(b) != 8 {
		return nil, errors.New("a CRC-64/NVME is the base64 of 8 bytes")
	}
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, err
	}
	// The state is a header (magic and table sum) and the 8-byte value.
	state = append(state[:len(state)-8], b...)
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, err
	}
	return h, nil
}
