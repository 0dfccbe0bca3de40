package upload

import (
	"context"
	"errors"
	"io"
)

const (
	// Bucket is the path-style bucket name of the binding server's endpoint.
	Bucket = "tether-artifacts"
	// MaxObjectSize is S3's object limit (5 TiB): 10,000 parts of at most
	// 5 GiB (multipart.go).
	MaxObjectSize int64 = 5 << 40
	// MaxSinglePutSize is S3's single-PUT limit (5 GiB): a larger object is
	// stored as a multipart upload, and a server-side copy of one takes
	// parts too.
	MaxSinglePutSize int64 = 5 << 30
	// ManifestName is the manifest's name under the job's prefix.
	ManifestName = "manifest.json"
	// MaxManifestSize bounds a manifest.
	MaxManifestSize = 16 << 20
	// MaxManifestEntries bounds the files one manifest lists: each costs
	// the server memory while the manifest is checked and two HEADs.
	MaxManifestEntries = 100_000
	// ReservedDir is the job-prefix directory only the server writes.
	ReservedDir = ".tether"
	// ManifestVersion is the manifest format version.
	ManifestVersion = "v1"
)

// Manifest lists every artifact of a job; the sidecar uploads it last.
type Manifest struct {
	Version string `json:"version"`
	JobID   string `json:"jobID"`
	// PodUID is the pod whose sidecar wrote it (required): a manifest of a
	// pod that is not its node's current one (replaced, preempted, or
	// another node's) is refused, and its verdict never recorded.
	PodUID string         `json:"podUID,omitempty"`
	Files  []ManifestFile `json:"files"`
}

// ManifestFile is one verified artifact.
type ManifestFile struct {
	// Path is relative to the artifact directory, with forward slashes.
	Path string `json:"path"`
	Size int64  `json:"size"`
	// MD5 is the lowercase hex MD5 of the content (its single-PUT ETag).
	MD5 string `json:"md5"`
	// CRC64NVME is the content's CRC-64/NVME in S3's form (base64 of the
	// 8 big-endian bytes, as in x-amz-checksum-crc64nvme): the verification
	// on a store whose ETags are not MD5s (SSE-KMS, SSE-C). Empty in
	// manifests of sidecars before it was recorded; such an entry can only
	// be verified by its MD5.
	CRC64NVME string `json:"crc64nvme,omitempty"`
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Size int64
	// ETag is the stored object's ETag, lowercase, without quotes: its hex
	// MD5 on a store whose ETags are MD5s (checksum.go).
	ETag string
	// CRC64NVME is the store's own checksum of the object (S3's base64
	// form), "" if the store reported none.
	CRC64NVME string
}

// ErrNotFound is returned by Backend.Head for a missing object.
var ErrNotFound = errors.New("object not found")

// Backend stores objects. Put must make an object visible only when it is
// complete (no partial object is ever readable under key) and return the
// stored object's ETag as the store reports it, so the caller can check it
// against the MD5 it computed while streaming.
type Backend interface {
	Put(ctx context.Context, key string, body io.Reader, size int64) (ObjectInfo, error)
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Copy replaces dst with src (used to promote pending objects).
	Copy(ctx context.Context, src, dst string) error
	Delete(ctx context.Context, key string) error
	// List returns the keys under prefix.
	List(ctx context.Context, prefix string) ([]string, error)
}
