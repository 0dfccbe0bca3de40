// Package upload is the artifact contract both sides share
// (docs/artifacts.md): the wire constants (bucket, token header, limits),
// the manifest's types, the key rules, and the Backend a store writes to.
//
// The sidecar's scanner, uploader and syncer are in pkg/sidecar/artifacts;
// the binding server's S3-compatible endpoint and its backends are in
// pkg/artifactstore. This package must stay free of either side's code.
package upload
