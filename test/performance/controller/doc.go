// Package controller benchmarks Tether's binding controller at scale against
// a real kube-apiserver and etcd (test/framework/testenv, binaries from
// hack/testbin.sh), with the whole control plane running in-process as its
// ServiceAccount, under the RBAC manifests/ ships. The benchmark installs
// the JobSet CRD next to Trainer's, as a cluster that runs Trainer serves it.
//
// BenchmarkBindAtScale (controller_bench_test.go) measures, in one run:
//
//   - the floor: the same API server creating 4,000 plain objects (2,000
//     ConfigMaps and 2,000 Secrets, the sizes of a WorkerBinding and a token
//     Secret) from the same number of client goroutines;
//
//   - the binding writes: the benchmark itself makes what the control plane
//     writes to bind 2,000 TrainJobs, one kind at a time and in a namespace
//     of their own (deleted afterwards): 2,000 token Secrets, WorkerBindings,
//     first statuses and Bound Events. <kind>-x-floor-object-apiserver-cpu
//     is each one's API-server CPU in plain objects of the floor, and
//     binding-writes-x-floor-apiserver-cpu all of them against the floor (the
//     unit of bind-2000-x-floor-apiserver-cpu): what a binding's writes cost
//     by themselves, whatever controller makes them. The run fails when
//     these stand-ins differ from what the control plane wrote
//     (matchesBind);
//
//   - 2,000 TrainJobs created unlabeled (no webhook call, no binding), then
//     2,000 labeled ones (through Tether's TrainJob webhook, which stamps
//     their ids, as in a cluster) while no replica is elected: the benchmark
//     holds the control plane's leader-election Lease. trainjobs-2000-s and
//     labeled-trainjobs-2000-s are their times, and
//     trainjobs-2000-x-floor-apiserver-cpu and
//     labeled-x-unlabeled-apiserver-cpu what the TrainJobs themselves cost
//     the API server (the latter: the webhook's path);
//
//   - the bind: the benchmark releases the Lease, the control plane is
//     elected and binds the 2,000 TrainJobs, a burst landing on the
//     controller at once. bind-2000-s is the time from the election until
//     watches have seen every WorkerBinding and token Secret (what a job's
//     pods wait for), and bind-2000-x-floor its ratio to the floor;
//     token-writes-x-floor the time the benchmark's own clients took to
//     create just the token Secrets and then the WorkerBindings (the binding
//     writes above) against the floor: the least bind-2000-x-floor can be,
//     whatever controller makes them; bind-x-token-writes the bind's time
//     against that (what the controller adds);
//     bind-tokens-x-floor-apiserver-cpu and bind-tokens-x-floor-cp-cpu the
//     CPU of kube-apiserver and etcd, and of this process, from the Lease's
//     release until the last token was seen (sampled every 100 ms), against
//     the floor's; bind-status-2000-s until they have seen every binding's
//     first status too; bind-2000-x-floor-apiserver-cpu the ratio of the CPU kube-apiserver
//     and etcd spent on each, read once the first statuses are seen
//     (steadier than wall time on a shared machine), cp-cpu-ms-per-bind
//     this process's CPU per TrainJob bound (the control plane with the
//     benchmark's client); bind-apiserver-requests-per-job every
//     kube-apiserver request of the phase per TrainJob (its
//     apiserver_request_total), logged by verb and resource beside the
//     floor's per plain object: where the API work of a binding goes. The
//     TrainJobs' own creates are not in the bind: the floor does not create
//     them either (before stop 41 the bind phase created them, and
//     trainjobs-2000-x-floor-apiserver-cpu, about 1.0, was inside the bind's
//     ratio); bind-x-binding-writes-apiserver-cpu the bind's API-server CPU
//     against the binding writes': what the controller adds to its own
//     writes (reads, conflicts, requeues); bound-events-per-job how many of
//     the TrainJobs have their Bound Event once Events stop arriving;
//
//   - TrainJobs created until 10,000 are bound (with their first statuses),
//     each created and bound at once as in a sweep (the webhook, the real informers and controllers:
//     the cache holds what production holds);
//     create-and-bind-x-floor-apiserver-cpu is its API-server CPU per job
//     against the floor's per pair of plain objects. Then the control
//     plane's memory:
//     cp-mib-10k-bindings is the Go heap in use (HeapInuse) after a GC with
//     10,000 bindings cached (the benchmark's own client holds next to
//     nothing), cp-heap-kib-per-binding the growth from the idle control
//     plane divided by the bindings, and rss-mib-10k-bindings the process's
//     VmRSS (the control plane, the benchmark and the Go runtime's unreturned
//     pages; kube-apiserver and etcd are processes of their own).
//     grow-10k-s is the growth's time and grow-apiserver-cpu-ms-per-bind
//     kube-apiserver's and etcd's CPU per TrainJob bound in it (the bindings
//     already there keep being reconciled meanwhile: no Trainer runs, so
//     every one waits for pods and looks again every 15 s).
//
//     go test -run '^$' -bench . -benchtime 1x -timeout 30m ./bench/controller/
//
// Each phase logs the CPU it took, the control plane's (this process) and
// kube-apiserver's and etcd's (its children), and the CPU pressure
// (/proc/pressure/cpu). TETHER_BENCH_JOBS (default 2000) and
// TETHER_BENCH_BINDINGS (default 10000) scale the two phases;
// TETHER_BENCH_CLIENTS (default 32) is the number of client goroutines
// creating objects; TETHER_BENCH_HEAPPROFILE=path writes a heap profile with
// every binding cached. TETHER_BENCH_APISERVER_CPUPROFILE=path writes
// a CPU profile of kube-apiserver taken from the start of the bind, 12
// seconds or TETHER_BENCH_APISERVER_CPUPROFILE_SECONDS (read it with the
// kube-apiserver binary hack/testbin.sh built), TETHER_BENCH_CPUPROFILE=path
// one of this process (the control plane and the benchmark's client) over
// the bind, and
// TETHER_BENCH_WRITES_CPUPROFILE=dir one of the first 2 seconds of each kind
// of binding write, as dir/<kind>.pprof.
// At stop 44, with TETHER_BENCH_BINDINGS=2000 (no growth), the control
// plane's CPU per bind was 2.4 to 4.4 ms (median of six runs 3.07, against
// 3.41 for the same code before it read its CA at most once a second and
// kept its loggers' values lazily), and bind-2000-x-floor 2.3 to 3.9, as
// noisy before the change as after it on a host where the floor itself
// took 2.6 to 4.2 s.
// Alone on 2 cores (CPU pressure some avg10 1 to 24 at the start) the
// whole run took 137 s at stop 43 (the binding writes about 12 s of it;
// 2,000 tokens in 6.8 to 7.7 s from the election, their first statuses by
// 11.6 to 12.4 s, every Bound Event sent; the growth to 10,000 in 74 to 76
// s), 142 to 144 s at stop 42, 112 s at stop 41, and 30 s more when the
// control plane's stop waited out the manager's grace period (6 of 16 runs
// at stop 41; a stop over 10 s now writes the goroutines to a file and
// says where); on 2 cores saturated by other work (avg10 90-98), an
// earlier version took 6 to 6.5 minutes. The watches the benchmark counts with are
// resumed from their last resourceVersion when the API server closes them
// (a watcher that falls behind; 10 times in a growth here), and say so. A
// phase fails after 2 minutes without progress (stallTimeout) or past 6
// minutes per 4,000 objects awaited (phaseTimeout). Progress goes to stderr
// every 15 s, with a goroutine dump after a minute without any. Nothing is
// asserted on time; the benchmark fails if a binding or Secret is missing or
// wrong (owner, job id, token hash) or a phase does not finish.
package controller
