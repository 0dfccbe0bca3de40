// Package endpoint is the binding server's side of artifact uploads
// (docs/artifacts.md): an S3-compatible, path-style PUT/HEAD endpoint for the
// bucket upload.Bucket, and the direct-upload authorize and commit requests
// (upload.PathAuthorize, upload.PathCommit).
//
// The Handler authenticates a request and checks its key before it reads a
// single byte of the body, streams the body to the store's backend while
// computing its MD5, and answers with the object's ETag only after the stored
// object's ETag was checked against that MD5. A PUT over an object with a
// different ETag is stored as pending (<job-id>/.tether/pending/<path>) until
// the binding's outcome is known: the controllers then promote or drop the
// pendings through the same store.Store (pkg/artifactstore/store), under the
// per-key locks the Handler's PUTs hold. A PUT of the manifest
// (<job-id>/manifest.json) is parsed and every entry checked in the backend
// (store.Store.CheckManifest); the result goes to Handler.OnManifest.
//
// The Handler is the store's HTTP door and nothing more: the Store it is
// given owns the backend, the key locks, readiness, the access log and the
// direct-upload policy. The package depends on neither controller-runtime
// nor client-go: the binding server injects how a token is authorized
// (Authorizer) and what happens with verified objects and manifests (the
// callbacks).
//
// The backends are pkg/artifactstore/fsstore (a local directory, the
// embedded default) and pkg/artifactstore/s3store (a bucket through
// minio-go).
package endpoint
