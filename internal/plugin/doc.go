// Package plugin is kubectl tether (cmd/kubectl-tether): get, describe,
// logs, artifacts ls|get, flush|drain|cancel and wait on WorkerBindings,
// built on pkg/client with cobra and cli-runtime's kubeconfig flags, in the
// style of kubectl-kueue. Its output formats have golden files
// (testdata/, regenerated with go test -update).
package plugin
