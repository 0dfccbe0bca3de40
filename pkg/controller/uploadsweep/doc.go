// Package uploadsweep removes what presigned direct-upload URLs write after
// their binding ended: a URL stays valid until it expires, whatever the
// binding says.
package uploadsweep
