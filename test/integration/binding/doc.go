// Package binding is the integration suite for the binding protocol: the
// real binding server inside the control plane (running as its
// ServiceAccount under the shipped RBAC) on a real kube-apiserver and etcd,
// and the real sidecar client, over real WebSocket connections on loopback.
package binding
