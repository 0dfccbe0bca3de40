// Package binding is the protocol between a bound job's sidecar and Tether's
// control plane, and nothing else: messages and frames, headers, paths,
// limits, close and error codes, the sidecar's environment variables and what
// its server URL must be (ParseServerURL), the token (one type: issue, parse,
// hash, header) and the token Secret's keys.
// Both halves import it: the server in pkg/bindingserver (control plane),
// the client in pkg/sidecar/session (sidecar).
//
// The wire protocol (docs/protocol.md) is versioned: registration is one
// HTTPS POST; liveness, progress and commands travel over one WebSocket
// session per worker. The token is always a header, never part of a URL. The
// worker's identity comes from its WorkerBinding, never from the request.
package binding
