// Package localcluster runs a complete Kubernetes control plane on loopback
// for Tether's e2e suite and demo: etcd and kube-apiserver (via envtest's
// process management), kube-controller-manager, kube-scheduler, kwok (fake
// nodes), JobSet, Kubeflow Trainer and Kueue from the binaries
// hack/testbin.sh builds, then Tether's own control plane as processes with
// the shipped manifests applied.
//
// Where the harness lives: the whole test estate is under test/, as
// Kueue's is: the suites (test/e2e, test/integration, test/install, ...) and
// the framework they share (test/framework: this library, testenv, testobj,
// s3server, soakcheck, benchutil, certs). internal/ keeps only what ships or
// builds. cmd/tether-demo, the demo binary, builds on this library; what
// keeps test code out of that binary is internal/archtest (no testing
// package, no init that exits: each relay the harness re-executes is a main
// package of its own, like trainerv20relay, node-init and netprobe), which
// also holds every hand-written non-test file under test/ to 700 lines.
//
// Two kinds of nodes. On the kwok nodes no kubelet runs, so PodRunner plays
// its part for bound trainer pods: it runs the real cmd/sidecar binary with
// the environment and files the injected pod spec gives it, a trainer
// stand-in in place of the training container, and writes container states
// into the Pod's status as a kubelet would. With Options.RealNode two real
// nodes (RealNode, node.go) run beside them on the cluster network:
// kubelet v1.37.2, containerd v2.x and Debian's runc run the images of
// `make images` (Tether's sidecar, the trainer stand-in, a pause image) in
// pods with addresses of their own (no hostNetwork anywhere).
// containerd, the kubelet and kube-proxy run under node-init, PID 1 of a
// private PID, mount and network namespace: their mounts never reach the
// host (/var/lib, /var/log, /run and the sysctls the kubelet sets are bound
// to the node's own directory), and when node-init ends the kernel ends
// every process of the node, shims and containers included; Stop then
// removes the node's cgroups. A TrainJob reaches the real nodes through
// their own Kueue queue (RealNodeQueue), whose flavor adds the node
// selector and the toleration of the nodes' taint.
//
// The cluster network (network.go, ClusterNetwork) is
// a real cluster's network: the two real nodes, each in network, PID and
// mount namespaces of its own, joined by a bridge
// in a network namespace of its own to each other and to the host's end of
// a veth, where kube-apiserver then listens. Pods get addresses from the
// CNI bridge and host-local plugins (a pod CIDR per node), kube-proxy in
// nftables mode routes Services inside each node's namespace, and CoreDNS
// (a Deployment behind kube-dns) answers the cluster zone and nothing else.
// Every address is from 198.18.0.0/15, no namespace has a default route,
// nothing is masqueraded or forwarded out, and Stop removes it all. Each
// network takes a /20 block of its own (netblock.go), so up to 16 clusters
// with real nodes run side by side on one host.
//
// Tether's control plane still runs as host processes: with the network,
// they listen on the host's veth address, the shipped Service
// tether-control-plane (its selector removed) has EndpointSlices of the
// harness's making pointing there (endpoints.go), the webhooks are
// registered by that Service (the apiserver dials an endpoint) and the
// sidecars get the Service's DNS name, as installed. The kwok pods'
// sidecars (PodRunner runs them as host processes: a kwok node runs no
// containers) live in a network namespace of the network's own, joined to
// the bridge like a node, with a kube-proxy of its own and the cluster DNS
// mounted over their /etc/resolv.conf (nethostpods.go): they dial the
// injected URL as a pod's sidecar does. The tests' own clients on the host
// have no kube-proxy or cluster DNS: they reach the binding server through
// a loopback forwarder that follows the same readiness (balancer.go).
// Without the network, the kwok pods' sidecars use that forwarder too, and
// the webhook is registered by the loopback URL of another. Kueue's,
// Trainer's and JobSet's webhooks (and Kueue's CRD conversion) are reached
// the same way on the network: their host processes listen on the veth
// address behind selector-less Services named as their own installs name
// them (kueue-webhook-service, kubeflow-trainer-controller-manager,
// jobset-webhook-service) with an EndpointSlice there
// (componentservices.go); without the network they are registered by
// loopback URL and listen on 127.0.0.1. Every process is stopped by PID on
// Stop (and killed by the kernel if the harness itself dies: Pdeathsig).
package localcluster
