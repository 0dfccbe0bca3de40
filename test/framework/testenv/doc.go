// Package testenv starts a real local control plane for Tether's integration
// tests, benchmarks and demo: kube-apiserver and etcd built by hack/testbin.sh,
// the Trainer v2.3 CRDs from its Go module, a minimal Kueue Workload CRD
// (crds/: what client.Cancel deactivates), Tether's CRD and its
// MutatingWebhookConfiguration from manifests/ (service references rewritten
// to the local webhook address), and Tether's control plane in-process with
// exactly the wiring cmd/tether-control-plane uses.
package testenv
