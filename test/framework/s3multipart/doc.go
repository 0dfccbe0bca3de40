// Package s3multipart gives tests an artifact backend with multipart
// uploads (objects.Multiparter) before the s3 backend has its own: Backend
// is an s3store.S3Backend whose uploads go through the S3 server's own
// multipart API (minio-go's Core), so what a test creates, lists and aborts
// is a real upload on a real server (test/framework/s3server). Keys are
// relative to the backend's Prefix, as every listing of the backend's is.
// Only tests import it.
package s3multipart
