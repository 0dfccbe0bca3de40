// Package sync benchmarks the sidecar's artifact sync: how soon a closed
// checkpoint is durable, and how fast many small files go.
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 30m ./test/performance/sync/
//
// The server is test/performance/upload's (benchutil.ArtifactServer): the binding server's artifact endpoint
// (endpoint.Handler, fs backend, endpoint.Route) on its own TLS listener on
// 127.0.0.1 with the binding server's http.Server timeouts, its Authorizer
// a stand-in accepting one token for one writable job. It records when it
// answered each PUT 200: the object stored, fsynced and its ETag checked,
// the moment an artifact is durable ("verified on the server").
//
// BenchmarkCheckpointCloseToVerified writes 50 checkpoints
// (TETHER_BENCH_SYNC_CHECKPOINTS) of 64 MiB (TETHER_BENCH_SYNC_CHECKPOINT_MIB)
// one after another, one every 1.5s (TETHER_BENCH_SYNC_PACE) or, if longer,
// twice the upload time of three checkpoints uploaded alone first (pace-s:
// an upload fits between two closes, so the figure is not a queue's): each in a new
// directory ckpt-<i>/model.bin, written in 1 MiB blocks and closed. The
// Syncer runs as cmd/sidecar configures it, twice in one run: first with
// file events off (the settle rule alone, 10s unchanged, a round every 10s:
// what main did), then on (upload on close). Each file's time from its close
// to the server's 200 gives close-to-verified-p50-ms and
// close-to-verified-p99-ms (events), settle-close-to-verified-p50-ms and
// settle-close-to-verified-p99-ms (before), x-settle-p50 (their p50 ratio).
// The file's own upload time, upload-p50-ms, is then measured in the same
// run: each checkpoint uploaded again by UploadFile alone, one at a time,
// its object deleted first; over-upload-p50-ms is close-to-verified p50 less
// upload p50 (target <= 1000). With 50 samples p99 is the worst one.
//
// BenchmarkSmallFiles uploads 10,000 files (TETHER_BENCH_SYNC_SMALL_FILES)
// of 1-4 KiB, 100 per directory, already settled, in one round (FlushNow),
// with main's 2 workers and 4 idle connections (baseline-small-files-per-s)
// and with the defaults (small-files-per-s; x-small-files their ratio;
// target >= 2,000/s), each with a fresh server and Uploader. Before them,
// the same files are stored straight on the store's file system by as many
// workers, with the least a durable store that never shows a partial object
// does (write a temporary file, fsync, rename, fsync the directory; no HTTP,
// TLS, MD5 or metadata): fs-floor-files-per-s, what the disk allows, and
// x-fs-floor, small-files-per-s against it. When the store is the default
// (the temp dir), the defaults run once more with the store in /dev/shm
// (tmpfs-small-files-per-s): the sidecar's and server's own rate, with the
// disk's fsyncs out of it. Then the
// manifest of the 10,000 alone (PutManifest: encoded, sent, and every entry
// checked by the server; manifest-10k-ms, target <= 1000) and the final
// flush (every file found unchanged, then the manifest again;
// final-flush-10k-ms).
//
// BenchmarkSidecarSmallFilesRSS runs the real sidecar binary (cmd/sidecar,
// built by the benchmark) as a child process on the same 10,000 files, its
// environment as the pod webhook injects it, and reports its peak RSS
// (VmHWM from /proc/<pid>/status, read every 20ms until it exits;
// sidecar-rss-mib, target <= 32) and the rate from its first to its last
// file PUT as the server saw them (sidecar-small-files-per-s). The binding
// protocol is not served: registration is answered 503 with Retry-After
// 3600, so the session client waits (as while the control plane is
// unreachable) and the sync runs meanwhile; on SIGTERM the sidecar's final
// flush must log every file verified and the manifest uploaded.
//
// TETHER_BENCH_SYNC_STORE puts the store's root in another directory (e.g.
// /dev/shm, to take the disk's fsyncs out). At smoke size
// (TETHER_BENCH_SMOKE=1, make bench-smoke) the defaults are 3 checkpoints
// of 4 MiB one every 300ms, a settle time and sync interval of a second,
// and 300 small files. Targets are reported, never
// asserted; the benchmarks fail only when an upload fails or is wrong.
package sync
