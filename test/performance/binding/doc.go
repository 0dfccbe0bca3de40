// Package binding benchmarks the binding server at scale: how many sidecar
// sessions one control-plane replica holds, and what they cost it.
//
// The benchmark (binding_bench_test.go) starts a real kube-apiserver and etcd
// with Tether's control plane in-process (test/framework/testenv, binaries from
// hack/testbin.sh), with the production status interval (30s), liveness
// write interval (10m), status write rate (15/s per replica), replica Lease
// (15s) and 3 missed heartbeats. It creates N trainer pods and N WorkerBindings directly
// through the API server: each pod carries the labels and the tether.dev/status
// annotation the server's identity check wants, and each binding the SHA-256
// of a fresh random token. No TrainJob exists, so the pod webhook (called
// for every pod, failurePolicy Fail) leaves the pods alone, which the
// benchmark checks. Once the binding server finds every binding in its cache
// (a session request with a wrong worker id is refused 403, not 401), the
// benchmark builds and starts the load generator (./loadgen, a command of
// its own; ./loadproto holds what the two share), so that the server's CPU
// and memory are those of its own process.
//
// The generator registers every worker (POST /v1/register, 32 at a time),
// then opens one WebSocket session per worker: at most 100 a second, 32
// handshakes at a time, each session's first heartbeat sent at once and its
// ack awaited before the dialer moves on (the server queues the Registered ->
// Running transition's write and acks at once). The pace matters: every
// session's first heartbeat is a transition written at once, so a fast ramp
// queues writes faster than a loaded kube-apiserver takes them. Every
// heartbeat carries progress and uploaded bytes that changed (written at
// most every 30s per binding, paced to 15 bindings a second per replica:
// the paced writes saturate, so the steady rate is the pacer's). Every
// session then heartbeats every
// heartbeat interval (10s), the sessions' slots spread evenly over the
// interval, sent by 8 shared sender goroutines; one reader goroutine per
// session matches acks to heartbeats and answers pings. One interval after
// the last session opened, and once every session was acked Running (its
// transition written; at most 3 minutes more, reported as settle-s), the
// measured phase starts (TETHER_BENCH_HOLD): the steady state of sessions
// that only heartbeat.
//
// Reported (never asserted; targets in parentheses):
//
//   - sessions: sessions open from the start to the end of the measured
//     phase (10,000);
//   - server-cpu-cores: CPU time of the benchmark process (control plane and
//     binding server; not kube-apiserver, etcd or the generator) per second
//     of the measured phase (<= 0.5);
//   - rss-kib-per-session: growth of the process's VmRSS, each read after
//     runtime.GC, from before the sessions opened (objects created and
//     cached, workers registered) to the end of the measured phase, per
//     session (<= 40 KiB); rss-scavenged-kib-per-session is the same after
//     debug.FreeOSMemory (without the GC's free headroom);
//   - rss-mib and heap-inuse-mib: the process's VmRSS and Go heap in use
//     (after a GC) at the end of the measured phase: one replica with N
//     bindings and N trainer pods cached and N sessions held, against the
//     chart's limits.memory (1Gi);
//   - ack-p50-ms, ack-p99-ms: heartbeat -> ack latency of the heartbeats sent
//     in the measured phase, as the generator sees it; a heartbeat never
//     answered counts with its age at the end (p99 <= 20 ms);
//     acks-over-interval counts the heartbeats answered after more than one
//     interval or not at all;
//   - status-writes, status-writes-per-s and status-write-apiserver-ms:
//     WorkerBinding status PUTs kube-apiserver served in the measured phase,
//     per second of it (<= 20), and their mean duration in it (from its
//     /metrics);
//   - apiserver-cpu-cores, etcd-cpu-cores, loadgen-cpu-cores: what the other
//     processes used meanwhile: on a small shared machine they compete with
//     the server for the same cores.
//
// Details (registration and handshake rates, first-heartbeat latency, the
// binding server's own metrics, memory breakdown, CPU pressure, the oldest
// renewal of the replica Lease seen in the measured phase) are printed to
// stderr as the run goes.
//
// Run:
//
//	go test -run '^$' -bench . -benchtime 1x ./test/performance/binding/
//
// Environment variables: TETHER_BENCH_SESSIONS (default 10000),
// TETHER_BENCH_HOLD (measured phase, default 60s), TETHER_BENCH_DIAL_RATE
// (sessions opened per second at most, default 100; 0: as fast as the
// server answers first heartbeats), TETHER_BENCH_DIALERS and
// TETHER_BENCH_REGISTRARS (generator concurrency, default 32 each),
// TETHER_BENCH_RESULT (keep the generator's JSON result in this file),
// TETHER_BENCH_CPUPROFILE and TETHER_BENCH_MEMPROFILE (a CPU profile of the
// server process during the measured phase, a heap profile at its end and
// one at its start, in <path>.start, for pprof -base),
// TETHER_BENCH_TRACE, TETHER_BENCH_MUTEXPROFILE and TETHER_BENCH_BLOCKPROFILE
// (the server's execution trace and contention profiles of the measured
// phase), TETHER_BENCH_LOADGEN_TRACE (the generator's execution trace of it).
// Diagnostics: TETHER_BENCH_STATUS_INTERVAL replaces the 30s status interval
// (e.g. 1h: no heartbeat-only status writes in the measured phase), and
// TETHER_BENCH_LEADER_ELECT=true keeps leader election on. It is off by
// default: the control plane then runs its controller at once, as the
// elected replica would, but a lease renewal the loaded API server does not
// answer within the renew deadline can no longer stop the whole manager,
// binding server included, in the middle of a run.
//
// A 10,000-session run takes about 5 minutes on an idle machine (up to 3
// more while a slow API server writes the ramp's transitions, 12 minutes on
// a 2-core machine shared with other work), within make bench's -timeout
// 30m; raise it for more sessions or a longer hold. Both
// processes raise RLIMIT_NOFILE to 65536 or, without CAP_SYS_RESOURCE, to
// their hard limit; each needs one descriptor per session plus a few hundred.
// At smoke size (TETHER_BENCH_SMOKE=1, make bench-smoke) the defaults are 20
// sessions and a measured phase of 10s, one heartbeat interval.
package binding
