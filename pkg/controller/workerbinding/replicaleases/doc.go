// Package replicaleases watches the binding-server replicas' Leases: a
// node whose session a replica holds is that replica's to watch while its
// Lease is current, and the binding controller's once it expired.
package replicaleases
