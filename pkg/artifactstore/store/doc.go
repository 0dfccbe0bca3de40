// Package store is the artifact store's owner: one Store per control-plane
// replica, built once by the wiring (pkg/controlplane), holds the backend,
// the per-key locks that order a key's writes and its promotion, the
// readiness of the backend, the access log and the direct-upload policy.
//
// Everything that touches the store's objects takes the Store: the
// S3-compatible endpoint the sidecars upload to (pkg/artifactstore/endpoint)
// for its PUTs, HEADs and commits, and the controllers for what a binding's
// end decides (Promote, DropPending), for the verdict on a stored manifest
// nobody recorded (StoredManifest) and for the sweep of direct uploads and
// open multipart uploads (SweepUploads, UploadJobs, AbortUnownedUploads). The controllers therefore never hold the
// endpoint's HTTP handler, and promotion still takes the same key locks as
// the PUTs it must not interleave with.
//
// The package sits below the control plane's halves: it depends on the
// store's own packages (objects, pending, verify) and pkg/upload, and on
// neither controller-runtime nor client-go.
package store
