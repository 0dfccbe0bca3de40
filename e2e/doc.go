// Package e2e will hold the end-to-end suite on a full local cluster (kwok,
// JobSet, Trainer, Kueue; issue 5). Until then, test/integration runs the
// control plane against a real kube-apiserver and etcd.
package e2e
