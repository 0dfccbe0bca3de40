// Package admission is the integration suite for admission and binding: a
// real kube-apiserver and etcd (hack/testbin.sh), Trainer's CRDs, and Tether's
// control plane running as its ServiceAccount under the RBAC in manifests/.
package admission
