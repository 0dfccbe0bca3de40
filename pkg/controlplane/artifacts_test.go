package controlplane

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
)

func TestArtifactManifestMemoryRatioFlag(t *testing.T) {
	parse := func(args ...string) (Options, error) {
		o := DefaultOptions()
		o.Namespace, o.ArtifactDir = "tether-system", "/tmp/a"
		fs := flag.NewFlagSet("tether-control-plane", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.BindFlags(fs)
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		return o, o.Validate()
	}
	if o, err := parse(); err != nil || o.ArtifactManifestMemoryRatio != endpoint.DefaultManifestMemoryRatio {
		t.Errorf("default: %v, %v", o.ArtifactManifestMemoryRatio, err)
	}
	if o, err := parse("--artifact-manifest-memory-ratio=0.4"); err != nil || o.ArtifactManifestMemoryRatio != 0.4 {
		t.Errorf("0.4: %v, %v", o.ArtifactManifestMemoryRatio, err)
	}
	for _, v := range []string{"0", "-0.1", "0.6"} {
		if _, err := parse("--artifact-manifest-memory-ratio=" + v); err == nil || !strings.Contains(err.Error(), "--artifact-manifest-memory-ratio="+v) {
			t.Errorf("%s: %v, want refused naming the flag", v, err)
		}
	}
}

// The collector reports what the budget holds, by namespace while it
// holds some, its limits and its refusals.
func TestManifestMemoryCollector(t *testing.T) {
	b := endpoint.NewMemoryBudget(0.25)
	total, ns := b.Limits()
	c := manifestMemoryCollector{b}
	want := fmt.Sprintf(`
# HELP tether_artifacts_manifest_memory_bytes Bytes reserved by the manifest uploads this replica is reading and checking (each estimated from its Content-Length before its body is read).
# TYPE tether_artifacts_manifest_memory_bytes gauge
tether_artifacts_manifest_memory_bytes 0
# HELP tether_artifacts_manifest_memory_limit_bytes What manifest uploads may hold on this replica (scope replica: --artifact-manifest-memory-ratio of the Go memory limit) and one namespace's share of it (scope namespace).
# TYPE tether_artifacts_manifest_memory_limit_bytes gauge
tether_artifacts_manifest_memory_limit_bytes{scope="namespace"} %d
tether_artifacts_manifest_memory_limit_bytes{scope="replica"} %d
`, ns, total)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "tether_artifacts_manifest_memory_bytes", "tether_artifacts_manifest_memory_limit_bytes"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "tether_artifacts_manifest_memory_namespace_bytes"); n != 0 {
		t.Errorf("%d namespace series with nothing held", n)
	}
	if n := testutil.CollectAndCount(c, "tether_artifacts_manifest_memory_refusals_total"); n != 2 {
		t.Errorf("%d refusal series, want both scopes from zero", n)
	}
}
