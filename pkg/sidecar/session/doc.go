// Package session is the sidecar's half of the binding protocol
// (pkg/binding): it registers the worker, keeps one WebSocket session open,
// heartbeats with progress, runs the server's commands, reports Finishing,
// and reconnects with backoff until the binding ends.
//
// The token and CA files are read through pkg/sidecar/credentials for every
// (re)connection, so rotations are picked up.
package session
