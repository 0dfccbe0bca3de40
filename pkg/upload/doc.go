// Package upload will hold artifact upload: the sidecar's single-PUT uploader
// with ETag verification and the binding server's S3-compatible endpoint
// (issue 4). Nothing is implemented here yet.
package upload
