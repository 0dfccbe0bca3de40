// Package artifacts is the sidecar's artifact side: the Scanner walks the
// artifact directory safely, the Uploader puts one file as one verified PUT
// (ETag equal to the MD5 streamed), and the Syncer runs periodic rounds and
// the final flush that ends with the manifest (docs/artifacts.md).
//
// It speaks the contract of pkg/upload and must stay free of Kubernetes
// client code: the sidecar's dependency set is kept small.
package artifacts
