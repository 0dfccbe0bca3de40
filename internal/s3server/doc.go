// Package s3server runs a real S3 server for tests, benchmarks, the e2e
// suite and the demo: versitygw (Apache-2.0, built by hack/testbin.sh from
// the Go module proxy) serving a posix directory on a loopback port, over
// plain HTTP or TLS. It knows nothing of Tether, so any package's tests can
// use it without an import cycle.
package s3server
