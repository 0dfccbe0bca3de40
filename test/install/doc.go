// Package install runs Tether as a platform team installs it:
// `helm install` of charts/tether on the local cluster's two real nodes
// (test/framework/localcluster with Options.Install), the images named through
// the chart's values under a team's registry, the in-cluster artifact store
// on a PersistentVolume the harness provides; then a labeled TrainJob to
// Succeeded on the real nodes, its artifacts checked byte by byte in the
// installed store, and read back with the Go client through the installed
// control plane. Debian's Prometheus scrapes it as the chart's
// ServiceMonitor describes, answers every panel query of the chart's
// dashboard, and fires and resolves each of the chart's alerts for a real
// cause (prometheus_test.go).
//
// Then an operator's first months, each with a bound job
// running through it: `helm upgrade` to another build (operate_test.go),
// `kubectl drain` of the node holding the job's session, `helm uninstall`
// and the quick start over the kept store (quickstart_test.go), and, last
// in the package because the node stays lost, a whole node killed under a
// 2-node job (unplanned_test.go). The tests run in file-name order and
// share the cluster: each leaves it as the next expects (both real nodes
// schedulable, one control-plane install Ready).
//
// It has a cluster of its own (TestMain): the e2e suite's runs the control
// plane as host processes under the same webhook names. Like e2e it runs
// only with TETHER_E2E=1, as root, after `make images` and `hack/testbin.sh
// e2e network helm prometheus` (`make e2e` does all three).
package install
