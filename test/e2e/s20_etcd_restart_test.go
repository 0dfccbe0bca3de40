package e2e

import "testing"

// Scenario 20: etcd is restarted mid-job (SIGTERM, then started again on the
// same data directory and URLs). The apiserver answers errors while it is
// away; the binding catches up once it is back, and the job ends Succeeded
// with every artifact verified, attempt 1, never HeartbeatLost. See
// controlPlaneRestart (scenario 19).
func TestScenario20EtcdRestarted(t *testing.T) {
	timed(t)
	suite.controlPlaneRestart(t, "etcd", suite.c.RestartEtcd)
}
