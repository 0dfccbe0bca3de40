// Package admission benchmarks the pod admission webhook end to end over
// HTTPS, as kube-apiserver calls it, against two floors.
//
// The benchmark (admission_bench_test.go) starts a real kube-apiserver and
// etcd (test/framework/testenv, binaries from hack/testbin.sh), creates a bound
// TrainJob, and serves mutate.PodHandler on controller-runtime's webhook
// server, registered as pkg/controlplane registers it, with a TrainJob lookup
// backed by a real metadata informer cache (managedFields stripped, as the
// control plane's manager caches them) and a real Events recorder. The
// floors:
//
//   - the bare floor (barefloor_test.go): a plain net/http server with the
//     TLS settings of controller-runtime's webhook server, whose handler
//     decodes the AdmissionReview and its pod with encoding/json and answers
//     allowed with no patch: no controller-runtime, informer, metric or logger;
//   - /floor, on the same controller-runtime server as /mutate-pod: decodes
//     the pod, re-encodes it and returns the (empty) patch between the two
//     through controller-runtime's admission plumbing and metrics.
//
// The three paths are driven at the same open-loop request rates
// (200, 500 and 1,000 rps by default, one after another) in interleaved
// slices by one load generator in a child process (loadgen_test.go, this
// test binary run again), so that the benchmark process's CPU time, read
// with getrusage(RUSAGE_SELF) around each slice, is the servers' side alone:
// kube-apiserver and etcd run in their own processes, and the benchmark
// process does nothing else while a slice runs.
//
// Reported at 1,000 rps: p50-ms, p99-ms and rps of /mutate-pod, the floors'
// floor-p50-ms, floor-p99-ms, bare-floor-p50-ms and bare-floor-p99-ms, server
// CPU per request (server-cpu-us/req, floor-server-cpu-us/req,
// bare-floor-server-cpu-us/req), and the ratios x-floor (p99 against /floor),
// x-bare-floor (p99 against the bare floor) and x-bare-floor-cpu (server CPU
// per request against the bare floor's). The other rates report the p99s,
// CPU per request and ratios with a -<rate>rps suffix (x-bare-floor-200rps).
//
//	go test -run '^$' -bench . -benchtime 1x ./test/performance/admission/
//
// Environment variables tune the load; see admission_bench_test.go:
// TETHER_BENCH_RATES (comma-separated requests per second, default
// 200,500,1000), TETHER_BENCH_DURATION (measured load per path and rate,
// default 10s), TETHER_BENCH_WARMUP (unmeasured load per path and rate first,
// default 1s), TETHER_BENCH_SLICES (slices per path and rate, even, default
// 6), TETHER_BENCH_WORKERS (client goroutines, default 64) and
// TETHER_BENCH_PROTO (h2 or http1, default h2). A default run takes about
// 3*3*(duration+warmup) plus ~10s of setup: under two minutes. At smoke
// size (TETHER_BENCH_SMOKE=1, make bench-smoke) the defaults are one second
// per path at 1,000 rps in two slices, no warmup.
//
// Targets (p99 <= 1.3x and CPU per admission <= 1.5x the bare floor's) are
// reported, never asserted: timing on a shared machine is not a test verdict.
// The benchmark fails only if a response is wrong (not 200, not allowed, or
// no patch from /mutate-pod).
package admission
