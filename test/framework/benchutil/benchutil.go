package benchutil

import (
	"crypto/x509"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/framework/certs"
)

// ProcessCPU is the CPU time (user + system) this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUPressure is the first line of /proc/pressure/cpu ("some avg10=…"):
// how much runnable work waited for a core, to read next to the figures.
func CPUPressure() string {
	raw, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return "unavailable"
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	return line
}

// SelfSignedCert returns a PEM certificate and key for 127.0.0.1, valid for a day.
func SelfSignedCert(b testing.TB) (certPEM, keyPEM []byte) {
	b.Helper()
	ca := certs.NewCA(b, certs.CommonName("tether-bench"), certs.Hosts("127.0.0.1"),
		certs.ExtKeyUsage(x509.ExtKeyUsageServerAuth), certs.NotAfter(time.Now().Add(24*time.Hour)))
	return ca.CertPEM, ca.KeyPEM
}
