// Package performance holds Tether's load benchmarks, one package per
// subject: admission (the pod webhook against two floors), binding (sidecar
// sessions held by one replica), controller (a burst of TrainJobs bound,
// and 10,000 bindings cached), sync (a checkpoint's close to verified,
// many small files) and upload (the artifact upload path and the manifest
// endpoint's memory).
//
// They live here, in the test estate and not beside the code they measure,
// because each one drives the system end to end as it runs: a real
// kube-apiserver and etcd or versitygw (test/framework, binaries from
// hack/testbin.sh), the control plane or the sidecar in a process of its
// own, a load generator in another, across many packages of pkg/ at once.
// Such a harness is test code that no shipped binary may link and no pkg/
// package may import (internal/archtest holds both), so it sits with the
// other suites that need it (test/integration, test/e2e); a micro-benchmark
// of one function stays in its package's tests (pkg/mutate's
// BenchmarkPodReview).
//
// make bench runs every benchmark of the module once at full size (tens of
// minutes; figures via b.ReportMetric, targets reported, never asserted).
// make bench-smoke, which CI runs, runs them all once at smoke size
// (TETHER_BENCH_SMOKE=1, test/framework/benchutil.Smoke): small files, few
// jobs and sessions, short phases, a few minutes in all. The figures then
// mean nothing, but every benchmark still does its work end to end and
// fails on a wrong answer, so none of them stops running unnoticed.
package performance
