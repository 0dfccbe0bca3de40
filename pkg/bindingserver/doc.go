// Package bindingserver is the control plane's sidecar-facing server (the
// server half of the binding protocol, pkg/binding): it runs inside the
// control plane (cmd/tether-control-plane) on its own HTTPS port, registers
// sidecars, holds one WebSocket session per worker, pushes commands, and
// keeps each WorkerBinding's status current. Every request passes the
// worker gate of pkg/workerauth first; the artifact store (pkg/artifactstore)
// and the orchestrator read endpoint (pkg/artifactreads) are served on the
// same listener.
//
// Files by concern: server.go the listener, register.go registration,
// open.go session opens and takeovers, session.go the WebSocket plumbing,
// readloop.go the read loop, heartbeat.go heartbeats, statuswriters.go and
// pacing.go the status writes, status.go the conflict-retrying write,
// skipped.go what scans skipped, commands.go and acks.go commands,
// artifacts.go the artifact store's mount and verdicts, liveness.go the
// per-second check, hub.go what a replica remembers per worker, metrics.go
// its collectors.
//
// Heartbeats live in memory; the WorkerBinding is written on transitions,
// for changed progress at most once per status interval, and for liveness
// alone once per liveness write interval, paced per replica (pacing.go).
// In between, the replica's own Lease (pkg/replicalease), named on each
// node it holds, vouches for its sessions; the controller catches the
// workers of a replica whose Lease expired. Durable state is the
// WorkerBinding, never a replica's memory, so any replica can serve any
// worker and a restarted server resumes where the record says.
package bindingserver
