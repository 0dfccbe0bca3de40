package objects

import "errors"

// ErrKeyConflict is returned by a backend that cannot store a key because of
// another key, e.g. fsstore.FSBackend with "a/b" stored and a PUT of "a/b/c".
// The endpoint answers it with 409.
var ErrKeyConflict = errors.New("the key conflicts with a stored key (an object where a directory is needed, or the reverse)")

// ErrInvalidKey is returned by a backend for a key it cannot represent. The
// endpoint answers it with 400.
var ErrInvalidKey = errors.New("invalid key")

// ErrSlowDown is wrapped by a backend's error when the storage asked the
// server to slow down or is briefly unavailable (S3 503 SlowDown or
// ServiceUnavailable). The endpoint answers it with 503 SlowDown and
// Retry-After, so the sidecar waits and retries instead of reading an
// internal error into it.
var ErrSlowDown = errors.New("the storage asks to slow down")

// ErrPrecondition is wrapped by a backend's error when the store refused a
// conditional write (S3 412 PreconditionFailed): another writer (another
// control-plane replica) changed the key since it was looked at.
var ErrPrecondition = errors.New("the key changed since it was read (412 PreconditionFailed)")
