// Package s3server runs a real S3 server for tests, benchmarks, the e2e
// suite and the demo, on loopback ports, over plain HTTP or TLS: versitygw
// (Apache-2.0) serving a posix directory, or SeaweedFS (Apache-2.0, `weed
// server`: master, volume server, filer and S3 gateway in one process), the
// second implementation the store suites run against so that Tether does
// not come to rest on one server's reading of S3. Both are built by
// hack/testbin.sh from the Go module proxy. It knows nothing of Tether, so
// any package's tests can use it without an import cycle.
package s3server
