#!/usr/bin/env bash
# make e2e's runner: the end-to-end packages in three lanes at once, each
# lane's clusters on a network block of their own
# (test/framework/localcluster/netblock.go), so the suite's waits overlap:
#
#   suite:      the e2e scenarios (./test/e2e/), printed as they run;
#   install:    Tether installed from its chart (./test/install/), then
#               scenario 1 against SeaweedFS, the second S3 server (kwok
#               nodes), then the short soak (kwok nodes, $SOAK_CI);
#   monitoring: a real Prometheus scraping a chart install of its own and
#               every shipped alert fired and resolved
#               (TestPrometheusScrapesAndAlerts, about 15 minutes).
#
# The background lanes' logs are printed when every lane has ended; each
# step's exit and duration are summed up last. Exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GO=${GO:-go}
E2E_TIMEOUT=${E2E_TIMEOUT:-30m}
SOAK_CI=${SOAK_CI:-SEED=20261205 DURATION=240s JOBS=10 REAL_NODES=0}
logs=${E2E_LOGS:-bin/e2e-logs}
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.exit

# step NAME CMD...: runs CMD with its output in $logs/NAME.log and records
# "exit seconds" in $logs/NAME.exit.
step() {
	local name=$1 start rc
	shift
	start=$(date +%s)
	echo "[e2e.sh $(date +%T)] $name: $*" >"$logs/$name.log"
	"$@" >>"$logs/$name.log" 2>&1
	rc=$?
	echo "$rc $(($(date +%s) - start))" >"$logs/$name.exit"
	return 0
}

echo "[e2e.sh $(date +%T)] lanes: suite (./test/e2e/) | install (./test/install/, then SeaweedFS scenario 1, then soak-ci) | monitoring (TestPrometheusScrapesAndAlerts); background logs in $logs"
(
	step install env TETHER_E2E=1 "$GO" test -count=1 -v -timeout 25m ./test/install/
	step seaweedfs env TETHER_E2E=1 TETHER_E2E_S3=seaweedfs TETHER_E2E_REAL_NODE=0 "$GO" test -count=1 -v -timeout 15m \
		-run '^TestScenario1HappyPathWithKueue$' ./test/e2e/
	# shellcheck disable=SC2086 # SOAK_CI is a list of assignments
	step soak-ci env TETHER_SOAK=1 $SOAK_CI "$GO" test -count=1 -v -timeout 20m -run '^TestSoak$' ./test/soak/
) &
install_lane=$!
(
	step monitoring env TETHER_E2E=1 TETHER_E2E_MONITORING=1 "$GO" test -count=1 -v -timeout 30m \
		-run '^TestPrometheusScrapesAndAlerts$' ./test/install/
) &
monitoring_lane=$!

start=$(date +%s)
TETHER_E2E=1 "$GO" test -count=1 -v -timeout "$E2E_TIMEOUT" ./test/e2e/
suite=$?
echo "$suite $(($(date +%s) - start))" >"$logs/suite.exit"
echo "[e2e.sh $(date +%T)] suite ended (exit $suite); waiting for the other lanes"
wait "$install_lane" "$monitoring_lane"

failed=0
for name in install seaweedfs soak-ci monitoring; do
	echo "--- $name ($logs/$name.log):"
	cat "$logs/$name.log" 2>/dev/null || echo "(no log: the step never started)"
done
echo "--- e2e lanes (exit, seconds):"
for name in suite install seaweedfs soak-ci monitoring; do
	read -r rc secs <"$logs/$name.exit" 2>/dev/null || { rc=1 secs=-; }
	echo "  $name: exit $rc, ${secs}s"
	[ "$rc" = 0 ] || failed=1
done
exit $failed
