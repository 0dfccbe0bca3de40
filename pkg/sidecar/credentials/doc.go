// Package credentials is the sidecar's plumbing shared by its two clients
// (the binding session in pkg/sidecar/session and the artifact uploader in
// pkg/sidecar/artifacts): reading the token file, loading the CA bundle and
// reloading it when the file changes, and the retry backoff.
//
// The kubelet updates a mounted Secret in place, so both files are read again
// for every new connection; nothing here caches a token.
package credentials
