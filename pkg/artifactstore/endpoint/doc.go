// Package endpoint is the binding server's side of artifact uploads
// (docs/artifacts.md): an S3-compatible, path-style PUT/HEAD endpoint for the
// bucket upload.Bucket, and the direct-upload authorize and commit requests
// (upload.PathAuthorize, upload.PathCommit).
//
// The Handler authenticates a request and checks its key before it reads a
// single byte of the body, streams the body to an upload.Backend while
// computing its MD5, and answers with the object's ETag only after the stored
// object's ETag was checked against that MD5. A PUT over an object with a
// different ETag is stored as pending (<job-id>/.tether/pending/<path>) until
// the binding's outcome is known: Handler.Promote moves pendings over the
// final objects, Handler.DropPending drops them (pkg/artifactstore/pending,
// under the Handler's per-key locks). A PUT of the manifest
// (<job-id>/manifest.json) is parsed and every entry checked in the backend
// (pkg/artifactstore/verify); the result goes to Handler.OnManifest.
//
// The package depends on neither controller-runtime nor client-go: the
// binding server injects how a token is authorized (Authorizer) and what
// happens with verified objects and manifests (the callbacks).
//
// The backends are pkg/artifactstore/fsstore (a local directory, the
// embedded default) and pkg/artifactstore/s3store (a bucket through
// minio-go).
package endpoint
