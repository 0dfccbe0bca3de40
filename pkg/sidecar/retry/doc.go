// Package retry is how the sidecar waits between attempts: Backoff, the
// capped exponential delays with full jitter that the binding session
// (pkg/sidecar/session) and the artifact uploader (pkg/sidecar/artifacts)
// retry with, and Sleep, a wait that ends with its context.
package retry
