// Package connrelay pipes the connections a listener accepts to new
// connections of a dialer's making, each in both directions, until Close.
// The local cluster's relays use it on both sides of a network namespace
// (TCP to Unix socket and back; path-based Unix sockets work across
// network namespaces): the host side in test/framework/localcluster, the side in
// the namespace in the trainerv20relay command.
package connrelay
