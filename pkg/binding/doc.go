// Package binding will hold the binding protocol between the sidecar and the
// control plane: registration, WebSocket heartbeats and commands, both server
// and client halves (issue 3). Nothing is implemented here yet.
package binding
