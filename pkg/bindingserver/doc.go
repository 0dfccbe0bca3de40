// Package server is the binding server half of pkg/binding: it runs inside
// the control plane (cmd/tether-control-plane) on its own HTTPS port,
// registers sidecars, holds one WebSocket session per worker, pushes
// commands, and keeps each WorkerBinding's status current.
//
// Heartbeats live in memory; the WorkerBinding is written on transitions,
// for changed progress at most once per status interval, and for liveness
// alone once per liveness write interval, paced per replica (pacing.go).
// In between, the replica's own Lease (replicalease.go), named on each node
// it holds, vouches for its sessions; the controller catches the workers of
// a replica whose Lease expired. Durable state is the WorkerBinding, never a
// replica's memory, so any replica can serve any worker and a restarted
// server resumes where the record says.
package server
