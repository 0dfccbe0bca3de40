// Package python runs the Python client's integration tests
// (clients/python/tests/integration) against a real kube-apiserver and
// Tether's control plane with its read API: the package installed into a
// venv of Debian's Python (hack/testbin.sh python), a tenant's kubeconfig
// holding only its namespace's RBAC.
package python
