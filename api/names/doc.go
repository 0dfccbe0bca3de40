// Package names holds every name that crosses a process boundary: the
// labels and annotations on Kubernetes objects, the token Secret's type and
// keys, the headers of the binding protocol, the artifact endpoint and the
// read endpoint, and the environment the pod webhook gives the sidecar.
// One file, names.go, defines them all, and docs/contract.md lists them all:
// a test holds the two equal.
//
// It imports nothing, so every side links it: the sidecar (which links no
// Kubernetes code, and so not api/v1alpha1), the control plane, the
// orchestrators' client and kubectl-tether.
package names
