// Package replicalease keeps one binding server replica's Lease renewed
// (KEP-589's answer to node heartbeats: one cheap object renewed every few
// seconds instead of a status write per worker). While the Lease vouches,
// the binding server names it on the bindings whose sessions it holds and
// writes their liveness only now and then; the controller
// (pkg/controller/workerbinding/replicaleases) catches the workers of a
// replica whose Lease expired.
//
// It sits below the binding server and the wiring, which share its label
// and defaults; it imports nothing of the module.
package replicalease
