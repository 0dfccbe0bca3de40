// Package objects is what the artifact store's parts agree on about stored
// objects (docs/artifacts.md): the key rules (a client's key, its pending
// key, a direct upload's key, a reader's key), the errors a backend wraps,
// the optional capabilities a backend may have beyond upload.Backend, and
// the per-key lock that orders a HEAD, a PUT and a promotion of one key.
//
// It sits beside the packages that use it, not above them: the backends
// (fsstore, s3store), the manifest verification (verify), the pending
// objects' promotion (pending) and the S3-compatible endpoint (endpoint).
// It imports no part of the store; the contract both sides of an upload
// share stays in pkg/upload.
package objects
