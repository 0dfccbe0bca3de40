package s3store

import "testing"

// SetMaxCopySize lowers, for t, the largest object one CopyObject copies,
// so a test copies a small object in parts.
func SetMaxCopySize(t testing.TB, n int64) {
	old := maxCopySize
	maxCopySize = n
	t.Cleanup(func() { maxCopySize = old })
}
