// Package benchutil holds what Tether's load benchmarks (bench/) share: the
// process's CPU time, the machine's CPU pressure line, and a self-signed
// loopback certificate.
package benchutil
