// Package credentials is what the sidecar's two clients (the binding session
// in pkg/sidecar/session and the artifact uploader in pkg/sidecar/artifacts)
// present and trust: the token read from its file, and the CA bundle, loaded
// and reloaded when the file changes.
//
// The kubelet updates a mounted Secret in place, so both files are read again
// for every new connection; nothing here caches a token.
package credentials
