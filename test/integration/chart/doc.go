// Package chart installs Tether on a real kube-apiserver (envtest: etcd and
// kube-apiserver built by hack/testbin.sh) both ways, `helm install` of
// charts/tether and `kubectl apply -k` of manifests/overlays/quick-start,
// and checks what the API server then holds: the same objects and RBAC.
package chart
