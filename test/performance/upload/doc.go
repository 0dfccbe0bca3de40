// Package upload benchmarks the sidecar's artifact upload path end to end:
// artifacts.Uploader (minio-go, TLS, token header, MD5 streamed, ETag verified)
// against the binding server's S3-compatible endpoint (endpoint.Handler with
// fsstore.FSBackend), over HTTPS on 127.0.0.1.
//
//	go test -run '^$' -bench . -benchtime 1x -timeout 30m ./test/performance/upload/
//
// The server is served in the benchmark process the way the binding server
// serves it (pkg/bindingserver): its own TCP listener on 127.0.0.1, wrapped
// by tls.NewListener (a fresh self-signed ECDSA P-256 certificate, TLS 1.2+,
// HTTP/1.1), an http.Server with the binding server's timeouts, and
// endpoint.Route in front. The Authorizer accepts exactly one token for one job
// id (writable binding): a stand-in for the binding server's
// token -> WorkerBinding cache lookup, which is not what is measured here.
//
// BenchmarkSinglePut1GiB uploads one file (1 GiB, TETHER_BENCH_UPLOAD_SIZE to
// change it) with the Uploader and, as the floor, with a plain net/http PUT of
// the same *os.File (ContentLength set, the same token header, a transport
// with the Uploader's TLS and HTTP settings, no Expect: 100-continue) to the
// same endpoint: the same server path (auth, streamed MD5, fs write, fsync,
// rename, ETag check). A third path, md5-floor, is the floor with its body
// teed into an MD5 that the answer's ETag must equal: the least a verified
// upload does, and so what separates the Uploader's cost from what the
// contract itself costs. The paths take turns (floor, md5-floor, uploader,
// floor, ...; TETHER_BENCH_UPLOAD_ROUNDS rounds each, default 3, after one
// unmeasured 4 MiB upload each), each round with a new client (so a new TLS
// connection) and the stored object checked (size, ETag = the file's MD5) and
// deleted after it, so the Uploader's HEAD finds nothing and it really sends
// the file (its Result must say "uploaded", in one attempt). The file is
// written once (1 MiB random blocks, each stamped with its offset), fsynced,
// and read once before the runs (computing its MD5), so every path reads it
// from a warm page cache (read_bytes, the storage reads, is logged per round:
// 0 means warm). Reported: mib-per-s (uploader, median), floor-mib-per-s
// (median), x-raw (their ratio; target >= 0.9), x-raw-best (best round
// against best round: less sensitive to neighbours taking the cores for a
// round), read-ratio and floor-read-ratio (bytes read from the file / file
// size, worst round; target 1.0), md5-floor-mib-per-s and x-md5-floor
// (uploader / md5-floor), and the process CPU per GiB of each path (client
// and server, same process: cpu-s-per-gib, floor-cpu-s-per-gib,
// md5-floor-cpu-s-per-gib, x-cpu), which holds still when neighbours steal
// cores. A fifth path, uploader-no-crc, is the Uploader without the
// CRC-64/NVME trailer every PUT now carries (UploaderConfig.NoTrailer: the
// Uploader before the checksum, against the same server): x-crc (uploader /
// uploader-no-crc throughput, target >= 0.95), x-crc-best, x-crc-cpu and
// x-raw-no-crc say what the checksum costs; BenchmarkUploaderRSS's
// x-crc-child-cpu and x-crc-server-cpu split it between the sidecar and the
// server. Every round is also printed to stderr as it ends ("upload-bench:"
// lines; go test keeps only 10 lines of a benchmark's log, used for the
// summary).
//
// read-ratio: the Uploader's reads of its file cannot be wrapped, so the
// process's rchar (/proc/self/io: bytes returned by read(2) and friends, from
// any file or socket) is taken around one upload, and the reads that are not
// the file's are subtracted: the server's reads from its TCP connections and
// what the server wrote to them (which the client, in the same process, reads
// back), both counted by the listener's connection wrapper. What remains
// besides the file is tiny and left in: the token file (65 bytes per request),
// the CA file (once per new connection), /proc/self/io itself (~100 bytes).
//
// BenchmarkUploaderRSS runs the Uploader in a separate process (this test
// binary re-executed with TETHER_BENCH_UPLOAD_CHILD set, uploading to the
// server in the benchmark process) and reports that process's peak RSS
// (VmHWM of /proc/self/status, read by the child just before it exits) for a
// 64 MiB file (rss-mib-64m), the big file (rss-mib-1g at the default size) and
// a child that only starts (rss-mib-baseline). Target: flat, <= 24 MiB. (The
// wait4 rusage's ru_maxrss is not used: Linux can fold the high-water mark of
// the address space the child shared with its parent before exec (os/exec
// starts children with CLONE_VM|CLONE_VFORK) into it; it read 16 MiB for a
// child whose VmHWM was 9 MiB.) The child's own rchar around the upload, less
// what the server wrote to it, is read-ratio-child. Children doing the floor's
// plain PUT and the md5-floor's PUT of the big file give floor-rss-mib-1g and
// the client's CPU alone (measured in the child around the upload):
// child-cpu-s-per-gib (Uploader), floor-child-cpu-s-per-gib,
// md5-floor-child-cpu-s-per-gib. TETHER_BENCH_UPLOAD_CHILD_CPUPROFILE=<prefix>
// makes every upload child write a CPU profile of its upload to
// <prefix>.<upload|floor|md5-floor>-<size> (the profiler's own reads then show
// in the child's read ratio).
//
// The same BenchmarkUploaderRSS reports the server's CPU alone: this
// process's CPU while the child uploads the big file (the child's CPU is its
// own), per GiB: server-cpu-s-per-gib (Uploader), floor-server-cpu-s-per-gib.
// Against it, the one MD5 the server must compute, measured in the same run
// (1 GiB hashed from memory on one goroutine, best of three): md5-cpu-s-per-gib,
// server-cpu-x-md5 (server / MD5: a ratio within the run, since the MD5's
// own cost moves with the CPU and its neighbours; 1.8 to 2.1 with TLS on
// loopback here, the TLS decryption and the fs write being most of the
// rest) and server-cpu-over-md5-s-per-gib (what the server spends besides it).
// BenchmarkSinglePut1GiB has a fourth path, transport: the floor's PUT of the
// same file to a handler on the same listener (TLS, http.Server) that
// discards the body: transport-mib-per-s, transport-cpu-s-per-gib, and
// x-transport (uploader / transport).
//
// BenchmarkParallel8x1GiB: 8 sidecars (TETHER_BENCH_UPLOAD_SIDECARS) each
// upload the big file at once, under its own token and job id, to versitygw
// (test/framework/s3server, TLS, its own process). Three phases, one after the
// other, the bucket checked (exactly the 8 objects, size and ETag; nothing
// pending, no direct upload left) and emptied after each: plain-put (a plain
// minio-go SigV4 PUT of the file straight to the store: the floor), proxy
// (artifacts.Uploader through the artifact endpoint with the S3 backend,
// direct uploads off) and direct (the same, direct uploads on: authorize,
// presigned PUT, commit with its server-side copy). Its server child does
// not probe the store, so no phase stores in parts at any size (the direct
// phase is one PUT and a copy even at 1 GiB, past the multipart threshold);
// BenchmarkLargeFile measures uploads in parts. The control plane runs in
// a child process (this test binary with TETHER_BENCH_UPLOAD_CHILD=server),
// so its CPU is that process's utime+stime from /proc/<pid>/stat, taken around
// the phase; versitygw's is read the same way from its pid; the sidecars'
// is this process's. Reported: plain-put-mib-per-s, proxy-mib-per-s,
// direct-mib-per-s (aggregate: 8 x size / wall time), x-proxy-plain,
// x-direct-plain, proxy-cp-cpu-s-per-gib, direct-cp-cpu-s-per-gib (control
// plane CPU per GiB uploaded; target <= 0.05) and direct-store-cpu-s-per-gib
// (versitygw's: it stores every byte twice in direct mode, the upload and
// the promoting copy, which versitygw's posix backend does as a full PUT).
// TETHER_BENCH_UPLOAD_PHASES (comma-separated phase names) runs only those.
// Peak disk: the file, plus 8 objects and, while they are committed, their
// copies (about 17 GiB at 1 GiB).
//
// BenchmarkLargeFile (large_bench_test.go): one file of
// TETHER_BENCH_LARGE_SIZE (default 6 GiB; same format as
// TETHER_BENCH_UPLOAD_SIZE) that the endpoint stores as an S3 multipart
// upload on versitygw, in one run: a hash pass (MD5 + CRC-64/NVME over the
// file's bytes in memory, the hashing's CPU alone), the floor (minio-go's
// multipart upload straight to the store: Content-MD5 per part, full-object
// CRC-64/NVME, the endpoint's part size), proxy (the Uploader in a child
// process through the endpoint in a server child, S3 backend probed and
// used), direct (the same children with direct uploads on: authorize
// answers "direct-parts", the Uploader sends the parts straight to
// versitygw at their presigned URLs and commits with their MD5s, the server
// child completes the upload, no copy) and resume (the Uploader's PUT cut
// at 60%, then a new Uploader). Whether the body went through the server
// child is checked on its rchar (/proc/<pid>/io) during the upload: at
// least the file in proxy, less than one part in direct.
// Reported: floor-mib-per-s, proxy-mib-per-s, large-proxy-x-floor,
// large-proxy-cp-cpu-x-hash (the server child's CPU over the hash pass's),
// direct-mib-per-s, large-direct-x-floor (direct over floor),
// large-direct-cp-cpu-s-per-gib (the server child's CPU during the direct
// upload, per GiB), large-sidecar-rss-mib (the proxy Uploader child's VmHWM),
// large-resume-resent-parts (bytes of the first 60% sent again, in parts)
// and large-peak-disk-mib (versitygw's directory, sampled). At smoke size
// the file is 16 MiB and the endpoint's threshold and part size 5 MiB.
// Peak disk: the file, plus what versitygw holds at once (1.5 x the size
// at 256 MiB: an upload's parts while it completes).
//
// BenchmarkManifestPutRSS (manifest_rss_bench_test.go) sends ten 16 MiB
// manifest PUTs of one token at once to the artifact endpoint served by a
// child process (TETHER_BENCH_UPLOAD_CHILD=manifest-server) and reports that
// process's peak RSS (VmHWM) against 512 MiB, half the chart's 1Gi limit
// (peak-rss-mib, peak-of-limit; target < 0.6) and how the PUTs were
// answered (ok, refused-retry-after). TETHER_BENCH_MANIFEST_ENTRIES sets the
// entries per manifest (default the cap, 100,000).
//
// BenchmarkManifestFlood (manifest_flood_bench_test.go) has one tenant's 50
// jobs each send a 16 MiB manifest at once (retrying after Retry-After, with
// "Expect: 100-continue" as the sidecar does) while a second tenant's job
// sends its manifest of 1,000 stored files, to the same child process, whose
// GOMEMLIMIT is the chart's (90% of limits.memory in
// charts/tether/values.yaml). Reported: manifest-flood-peak-rss-x-limit (the
// child's VmHWM over limits.memory; bar <= 0.75), manifest-flood-honest-x-alone
// (the second tenant's manifest PUT, median of five during the flood over
// median of five alone in the same run; bar <= 2), flood-ok, flood-refused,
// flood-s, honest-alone-ms, honest-flood-ms; the machine's CPU pressure
// (/proc/pressure/cpu avg10) before and after is printed with them.
// TETHER_BENCH_UPLOAD_STORE puts both manifest benchmarks' store there too.
//
// Environment: TETHER_BENCH_UPLOAD_SIZE (bytes, or with a K/M/G or KiB/MiB/GiB
// suffix; default 1GiB), TETHER_BENCH_UPLOAD_ROUNDS (default 3),
// TETHER_BENCH_UPLOAD_STORE (a directory to put the store's root in, e.g.
// /dev/shm to take the disk's fsync out of the floor; default the temp dir).
// The files are made under TMPDIR (size + 64 MiB + 4 MiB, removed at the end);
// the store holds at most one object at a time.
//
// At smoke size (TETHER_BENCH_SMOKE=1, make bench-smoke) the defaults are a
// 16 MiB big file (4 MiB for the small one, 64 MiB hashed for the MD5
// figure), one round, 2 sidecars, and manifests of 1,000 entries: 3 PUTs
// at once, or 3 flooding jobs against an honest manifest of 20 files
// timed twice alone and twice in the flood.
//
// Targets are reported, never asserted: timing on a shared machine is not a
// test verdict. The benchmark fails only if an upload fails or is wrong.
package upload
