// Package e2e is Tether's end-to-end suite on a full local cluster: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok, JobSet,
// Kubeflow Trainer and Kueue, all real and built from the Go module proxy by
// hack/testbin.sh, with Tether's control plane (cmd/tether-control-plane,
// two replicas behind loopback "Services") installed from manifests/ and
// artifacts in a real S3 server (versitygw). kwok runs no containers, so
// test/framework/localcluster's PodRunner runs the real cmd/sidecar and a trainer
// stand-in for each injected pod and writes their exits into the Pod status
// as the kubelet would.
//
// Scenarios that break something every job feels, or need a queue or a
// server-wide counter to themselves, run one at a time first; the others
// (shared) then run together (phases_test.go).
//
// Run it with `make e2e` (TETHER_E2E=1); plain `go test ./...` skips it.
package e2e
