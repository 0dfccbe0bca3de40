// Package benchutil holds what Tether's load benchmarks (test/performance/)
// share: the process's CPU time, the machine's CPU pressure line, a
// self-signed loopback certificate, and the binding server's artifact
// endpoint as it serves it (ArtifactServer).
package benchutil
