// Package binding is the protocol between a bound job's sidecar and Tether's
// control plane, and both of its halves: the Server that runs in cmd/webhook
// and the Client that cmd/sidecar uses.
//
// The wire protocol (docs/protocol.md) is versioned: registration is one
// HTTPS POST; liveness, progress and commands travel over one WebSocket
// session per worker. The token is always a header, never part of a URL. The
// worker's identity comes from its WorkerBinding, never from the request.
package binding
