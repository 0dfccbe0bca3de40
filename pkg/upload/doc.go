// Package upload moves a bound job's artifacts from the trainer's artifact
// directory to storage, with verified integrity (docs/artifacts.md).
//
// This package holds what both sides share: the wire constants, the
// manifest, and the Backend a store writes to. The sidecar's uploader is in
// this package too (it must stay free of Kubernetes client code); the binding
// server's S3-compatible endpoint and its backends are in pkg/upload/store.
package upload
