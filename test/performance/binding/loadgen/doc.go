// Command loadgen is the binding benchmark's load generator
// (BenchmarkBindingSessions in test/performance/binding, whose package
// documentation describes the load): a process of its own, so that the
// server's CPU and memory are those of the benchmark's process. The benchmark builds it,
// starts it with -config (a bench.LoadgenConfig as JSON) and talks to it
// through its stdin (commands) and stdout (event lines prefixed
// bench.EventPrefix); it exits when its stdin closes or at the
// configuration's deadline.
//
// It was a mode of the benchmark's test binary (a TestMain that exited
// when an environment variable was set); as a main package of its own it
// runs no test code and the test binary runs no generator.
package main
