// Package uploadsweep removes what presigned direct-upload URLs write after
// their binding ended (a URL stays valid until it expires, whatever the
// binding says) and aborts the job's open multipart uploads, which the
// store bills until they are aborted.
package uploadsweep
