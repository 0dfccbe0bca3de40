// Package chart tests the Helm chart charts/tether against the kustomize
// manifests in manifests/: rendered with the same settings they must give the
// same objects (RBAC included), the chart must lint clean, and its README must
// list every value with its default. helm and kubectl are the binaries
// hack/testbin.sh builds (make testbin); the install on a real
// kube-apiserver is in test/integration/chart.
package chart
