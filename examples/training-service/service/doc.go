// Package service is an example training service built on pkg/client: it
// submits a Tether-bound TrainJob to a Kueue queue, follows it through
// admission and training, downloads its verified artifacts, and cancels a
// second job after a flush with client.Cancel: a final flush, then its Kueue
// Workload deactivated with the service's own credentials (its Role needs
// list and patch on workloads.kueue.x-k8s.io besides the orchestrator's
// rules, docs/orchestrator.md). main.go runs it; the e2e suite (scenario
// 14) runs it against the local cluster.
package service
