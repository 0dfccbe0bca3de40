package objects

import "github.com/tether-dev/tether/pkg/upload"

// Verification is what proves that a stored object holds the bytes it was
// sent (docs/artifacts.md, "Verification"). The zero value is the default
// contract: the store's ETag of a single PUT, and of a copy, is the MD5; a
// CRC-64/NVME the store reports must match too. ByChecksum is for a store
// whose ETags are not MD5s (SSE-KMS, SSE-C): the store's own CRC-64/NVME,
// sent with every PUT and checked by the store, is then the verification
// and the ETag says nothing.
type Verification struct {
	ByChecksum bool
}

// Verifier is a backend that knows which Verification its store allows
// (S3Backend, once probed). A backend that is not one is trusted by its
// ETag (FSBackend hashes what it writes itself).
type Verifier interface {
	Verification() Verification
}

// VerificationOf is b's Verification.
func VerificationOf(b upload.Backend) Verification {
	if v, ok := b.(Verifier); ok {
		return v.Verification()
	}
	return Verification{}
}

// What names what is compared, for messages.
func (v Verification) What() string {
	if v.ByChecksum {
		return "CRC-64/NVME (x-amz-checksum-crc64nvme; its ETags are not MD5s)"
	}
	return "ETag (or its CRC-64/NVME)"
}

// Holds says whether info is the content of size bytes with MD5 md5 (hex)
// and CRC-64/NVME crc (S3's form); either digest may be unknown (""). A
// checksum both sides know must match; then the ETag must be the MD5, or
// (ByChecksum, or an object stored in parts, whose ETag is never its MD5)
// the store's checksum the CRC.
func (v Verification) Holds(info upload.ObjectInfo, size int64, md5, crc string) bool {
	if info.Size != size || info.CRC64NVME != "" && crc != "" && info.CRC64NVME != crc {
		return false
	}
	if v.ByChecksum || upload.IsMultipartETag(info.ETag) {
		return crc != "" && info.CRC64NVME == crc
	}
	return md5 != "" && info.ETag == md5
}

// Same says whether a and b, two stored objects (a copy and its source,
// an object before and after), have the same content.
func (v Verification) Same(a, b upload.ObjectInfo) bool {
	if a.Size != b.Size || a.CRC64NVME != "" && b.CRC64NVME != "" && a.CRC64NVME != b.CRC64NVME {
		return false
	}
	// A copy of an object stored in parts may be stored in other parts (a
	// different ETag) or in one: its checksum says whether it is the same.
	if v.ByChecksum || upload.IsMultipartETag(a.ETag) || upload.IsMultipartETag(b.ETag) {
		return a.CRC64NVME != "" && a.CRC64NVME == b.CRC64NVME
	}
	return a.ETag == b.ETag
}

// Listed says whether info is the version manifest entry f lists. An entry
// without a CRC (a sidecar before it was recorded) is never verified by
// checksum.
func (v Verification) Listed(info upload.ObjectInfo, f upload.ManifestFile) bool {
	return v.Holds(info, f.Size, f.MD5, f.CRC64NVME)
}
