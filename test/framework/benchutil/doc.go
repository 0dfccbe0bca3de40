// Package benchutil holds what Tether's load benchmarks (test/performance)
// share: the smoke size's switch (Smoke, Size: TETHER_BENCH_SMOKE=1, read
// here and nowhere else), the process's CPU time, the machine's CPU
// pressure line, a self-signed loopback certificate, the admission
// benchmark's bare floor, and the binding server's artifact endpoint as it
// serves it (ArtifactServer).
package benchutil
