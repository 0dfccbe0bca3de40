// Package s3store is the artifact store's S3 backend (S3Backend, through
// minio-go, docs/artifacts.md): every object one single PUT, so its ETag is
// its MD5. Beyond upload.Backend it has the capabilities in
// pkg/artifactstore/objects a bucket has: Stater and Opener, presigned GETs
// for readers (Presigner) and PUTs for direct uploads (PutPresigner), and
// paged and delimiter listings for the upload sweep (PageLister, DirLister).
package s3store
