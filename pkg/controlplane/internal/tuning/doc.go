// Package tuning holds how the control plane's process is tuned to run
// lean, apart from what it runs: the Go runtime's soft memory limit
// (GoMemoryLimit), the trimming of what the manager's cache keeps
// (CacheTransform), loggers that encode their values only for lines they
// write (LazyValues), and the API client's settings (ClientSettings). Each
// changes what the process costs (memory, CPU, queueing), never what it
// decides: without them the control plane behaves the same, at a higher
// cost.
//
// pkg/controlplane applies them and passes the ones its callers apply
// (the binary, the test environment, the benchmarks) on.
package tuning
