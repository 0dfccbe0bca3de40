// Package localcluster runs a complete Kubernetes control plane on loopback
// for Tether's e2e suite and demo: etcd and kube-apiserver (via envtest's
// process management), kube-controller-manager, kube-scheduler, kwok (fake
// nodes), JobSet, Kubeflow Trainer and Kueue from the binaries
// hack/testbin.sh builds, then Tether's own control plane as processes with
// the shipped manifests applied.
//
// No kubelet runs here, so PodRunner plays its part for bound trainer pods:
// it runs the real cmd/sidecar binary with the environment and files the
// injected pod spec gives it, a trainer stand-in in place of the training
// container, and writes container states into the Pod's status as a kubelet
// would. Every webhook is registered by loopback URL (never a Service), every
// listener binds 127.0.0.1, and every process is stopped by PID on Stop (and
// killed by the kernel if the harness itself dies: Pdeathsig).
package localcluster
