// Package admission benchmarks the pod admission webhook end to end over
// HTTPS, as kube-apiserver calls it, against a floor that does the minimum any
// pod webhook must do.
//
// The benchmark (admission_bench_test.go) starts a real kube-apiserver and
// etcd (internal/testenv, binaries from hack/testbin.sh), creates a bound
// TrainJob, and serves mutate.PodHandler from controller-runtime's webhook
// server with a TrainJob lookup backed by a real metadata informer cache.
// On the same server, /floor decodes the same AdmissionReview's pod,
// re-encodes it and returns the (empty) JSON patch between the two: the cost
// of admission plumbing, TLS and HTTP/2 without Tether's lookup and injection.
//
// Both paths are driven with the same open-loop request rate, in alternating
// slices, and the benchmark reports mutate-pod latency percentiles (p50-ms,
// p99-ms), the achieved rate (rps), the floor's (floor-p50-ms, floor-p99-ms),
// the ratio of the two paths' p99 (x-floor), and each path's CPU time per
// request in the benchmark process, client and server (cpu-us/req,
// floor-cpu-us/req), which stays meaningful when neighbours steal cores:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/...
//
// Environment variables tune the load; see admission_bench_test.go:
// TETHER_BENCH_DURATION (measured load per path, default 20s),
// TETHER_BENCH_RATE (requests per second, default 1000),
// TETHER_BENCH_WARMUP (unmeasured load per path first, default 2s),
// TETHER_BENCH_SLICES (alternating slices per path, default 8),
// TETHER_BENCH_WORKERS (client goroutines, default 64) and
// TETHER_BENCH_PROTO (h2 or http1, default h2). A run takes about
// 2*(duration+warmup) plus ~10s of setup; raise go test's -timeout (10m)
// for long durations.
//
// Targets (p99 <= 2ms at 1000 rps, x-floor <= 1.5) are reported, never
// asserted: timing on a shared machine is not a test verdict. The benchmark
// fails only if a response is wrong (not 200, not allowed, or no patch from
// /mutate-pod).
package admission
