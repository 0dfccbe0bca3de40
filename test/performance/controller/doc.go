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
//     first statuses and Bound Events, the Secrets and WorkerBindings each
//     timed until a watch saw the last, as the bind is.
//     <kind>-x-floor-object-apiserver-cpu is each one's API-server CPU in
//     plain objects of the floor, and binding-writes-x-floor-apiserver-cpu
//     all of them against the floor: what a binding's writes cost by
//     themselves, whatever controller makes them (a WorkerBinding, a CRD,
//     is written as JSON and its status through a subresource: it costs
//     more than a plain object of its size). The run fails when these
//     stand-ins differ from what the control plane wrote (matchesBind);
//
//   - 2,000 TrainJobs created unlabeled (no webhook call, no binding), then
//     2,000 labeled ones (through Tether's TrainJob webhook, which stamps
//     their ids, as in a cluster) while no replica is elected: the benchmark
//     holds the control plane's leader-election Lease. trainjobs-2000-s and
//     labeled-trainjobs-2000-s are their times, and
//     trainjobs-2000-x-floor-apiserver-cpu and
//     labeled-x-unlabeled-apiserver-cpu what the TrainJobs themselves cost
//     the API server (the latter: the webhook's path, a TrainJob against a
//     TrainJob, no plain object in it);
//
//   - the bind: the benchmark releases the Lease, the control plane is
//     elected and binds the 2,000 TrainJobs, a burst landing on the
//     controller at once. bind-2000-s is the time from the election until
//     watches have seen every WorkerBinding and token Secret (what a job's
//     pods wait for); bind-x-token-writes is that time against the
//     benchmark's own clients creating the same token Secrets and then the
//     same WorkerBindings (the binding writes above): what the controller
//     adds to the writes themselves; token-writes-x-floor those writes
//     against the floor. bind-tokens-x-floor-apiserver-cpu and
//     bind-tokens-x-floor-cp-cpu are the CPU of kube-apiserver and etcd,
//     and of this process, from the Lease's release until the last token
//     was seen (sampled every 100 ms), against the floor's;
//     bind-status-2000-s the time until watches have seen every binding's
//     first status too; bind-x-binding-writes-apiserver-cpu the CPU
//     kube-apiserver and etcd spent on the bind (from the Lease's release
//     until every first status and Bound Event is in) against the binding
//     writes': what the controller adds to its own writes (reads,
//     conflicts, requeues), in CPU time, steadier than wall time on a
//     shared machine; cp-cpu-ms-per-bind this process's CPU per TrainJob
//     bound (the control plane with the benchmark's client);
//     bind-apiserver-requests-per-job every kube-apiserver request of the
//     phase per TrainJob (its apiserver_request_total), logged by verb and
//     resource beside the floor's per plain object: where the API work of a
//     binding goes; bound-events-per-job how many of the TrainJobs have
//     their Bound Event. The TrainJobs' own creates are not in the bind: the
//     binding writes do not create them either;
//
//   - TrainJobs created until 10,000 are bound (with their first statuses),
//     each created and bound at once as in a sweep (the webhook, the real
//     informers and controllers: the cache holds what production holds);
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
// The bind is judged against the benchmark's own binding writes
// (bind-x-token-writes, bind-x-binding-writes-apiserver-cpu), not against
// the plain-object floor: the floor shows what the API server does at
// best, but no controller can bring a CRD's JSON writes and its status
// subresource down to plain objects' cost, so a bar on the bind against
// the floor measured the API server's CRD path, not the controller. The
// bind's time and CPU against the floor were therefore dropped; each is
// bind-x-token-writes times token-writes-x-floor (and
// bind-x-binding-writes-apiserver-cpu times
// binding-writes-x-floor-apiserver-cpu), both reported.
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 30m ./test/performance/controller/
//
// Each phase logs the CPU it took, the control plane's (this process) and
// kube-apiserver's and etcd's (its children), and the CPU pressure
// (/proc/pressure/cpu). TETHER_BENCH_JOBS (default 2000) and
// TETHER_BENCH_BINDINGS (default 10000) scale the two phases;
// TETHER_BENCH_CLIENTS (default 32) is the number of client goroutines
// creating objects; at smoke size (TETHER_BENCH_SMOKE=1, make bench-smoke)
// their defaults are 40, 80 and 8. TETHER_BENCH_HEAPPROFILE=path writes a
// heap profile with every binding cached.
// TETHER_BENCH_APISERVER_CPUPROFILE=path writes a CPU profile of
// kube-apiserver taken from the start of the bind, 12 seconds or
// TETHER_BENCH_APISERVER_CPUPROFILE_SECONDS (read it with the
// kube-apiserver binary hack/testbin.sh built), TETHER_BENCH_CPUPROFILE=path
// one of this process (the control plane and the benchmark's client) over
// the bind, and TETHER_BENCH_WRITES_CPUPROFILE=dir one of the first 2
// seconds of each kind of binding write, as dir/<kind>.pprof.
//
// Measured on 2 cores with TETHER_BENCH_BINDINGS=2000 (no growth), the
// control plane's CPU per bind was 2.4 to 4.4 ms (median of six runs 3.07,
// against 3.41 before it read its CA at most once a second and kept its
// loggers' values lazily), and the bind 2.3 to 3.9 times the floor, as
// noisy before that change as after it on a host where the floor itself
// took 2.6 to 4.2 s. Alone on 2 cores (CPU pressure some avg10 1 to 24 at
// the start) a whole default run took 112 to 144 s (the binding writes
// about 12 s of it; 2,000 tokens in 6.8 to 7.7 s from the election, their
// first statuses by 11.6 to 12.4 s, every Bound Event sent; the growth to
// 10,000 in 74 to 76 s), and 30 s more when the control plane's stop
// waited out the manager's grace period (a stop over 10 s now writes the
// goroutines to a file and says where); on 2 cores saturated by other work
// (avg10 90-98) an earlier version took 6 to 6.5 minutes. The watches the
// benchmark counts with are resumed from their last resourceVersion when
// the API server closes them (a watcher that falls behind; 10 times in a
// growth here), and say so. A phase fails after 2 minutes without progress
// (stallTimeout) or past 6 minutes per 4,000 objects awaited
// (phaseTimeout). Progress goes to stderr every 15 s, with a goroutine dump
// after a minute without any. Nothing is asserted on time; the benchmark
// fails if a binding or Secret is missing or wrong (owner, job id, token
// hash) or a phase does not finish.
package controller
