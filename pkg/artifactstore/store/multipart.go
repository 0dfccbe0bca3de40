package store

import "github.com/tether-dev/tether/pkg/upload"

// DefaultMaxLargeUploads is how many bodies one replica stores in parts at
// once: each holds a connection to the store and a few small buffers,
// never a part.
const DefaultMaxLargeUploads = 16

// MultipartOptions configure how the endpoint stores large bodies in parts
// (docs/artifacts.md, "Files in parts").
type MultipartOptions struct {
	// Threshold is the object size from which a body is stored in parts
	// where the store can verify them (default
	// upload.DefaultMultipartThreshold).
	Threshold int64
	// PartSize is the smallest part (default upload.DefaultPartSize;
	// upload.PartSize raises it so a legal object fits in its parts).
	PartSize int64
	// MaxConcurrent bounds the bodies this replica stores in parts at once
	// (default DefaultMaxLargeUploads): one more is refused with 503
	// SlowDown and Retry-After before its body is read.
	MaxConcurrent int
}

// Multipart is the store's multipart options with their defaults filled in.
func (s *Store) Multipart() MultipartOptions {
	o := s.opts.Multipart
	if o.Threshold <= 0 {
		o.Threshold = upload.DefaultMultipartThreshold
	}
	if o.PartSize <= 0 {
		o.PartSize = upload.DefaultPartSize
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxLargeUploads
	}
	return o
}
