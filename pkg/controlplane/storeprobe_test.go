package controlplane

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// The control plane's start-up probe: a store whose ETags are not MD5s is
// verified by its checksums (logged, exported); without checksums too it
// refuses to start, naming the cause and the fix.
func TestProbeStore(t *testing.T) {
	ctx := context.Background()
	s, err := s3server.Start(ctx, s3server.Options{Dir: t.TempDir(), AccessKey: "probe-access", SecretKey: "probe-secret-0123456789"})
	if errors.Is(err, s3server.ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if err := s.Admin.MakeBucket(ctx, "probed", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fault  s3server.Fault
		refuse bool
	}{{s3server.FaultNone, false}, {s3server.FaultRandomETag, false}, {s3server.FaultRandomETag | s3server.FaultNoChecksums, true}} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			f, err := s3server.NewFront(s.Endpoint, tc.fault)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: f.Endpoint, AccessKey: "probe-access", SecretKey: "probe-secret-0123456789", Region: "us-east-1", Bucket: "probed"})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			log := funcr.New(func(prefix, args string) { logs.WriteString(prefix + " " + args + "\n") }, funcr.Options{})
			caps, err := probeStore(ctx, b, log)
			if tc.refuse {
				if err == nil || !strings.Contains(err.Error(), "--s3-bucket") || !strings.Contains(err.Error(), "SSE-KMS") || !strings.Contains(err.Error(), "use a bucket without") {
					t.Fatalf("probeStore: %v; want a refusal naming the cause and the fix", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, want := b.Verification(), (objects.Verification{ByChecksum: tc.fault != s3server.FaultNone}); got != want {
				t.Errorf("verification %+v, want %+v", got, want)
			}
			if !strings.Contains(logs.String(), "artifact store probed") || !strings.Contains(logs.String(), "artifact verification chosen") {
				t.Errorf("log:\n%s", logs.String())
			}
			reg := prometheus.NewPedanticRegistry()
			var probed atomic.Pointer[s3store.Capabilities]
			reg.MustRegister(newCapabilityCollector(&probed))
			if n, err := testutil.GatherAndCount(reg, "tether_artifact_store_capability"); err != nil || n != 0 {
				t.Errorf("%d series before the probe, %v; want none", n, err)
			}
			probed.Store(&caps)
			want := 0.0
			if tc.fault == s3server.FaultNone {
				want = 1
			}
			if n, err := testutil.GatherAndCount(reg, "tether_artifact_store_capability"); err != nil || n != len(caps.Each()) {
				t.Errorf("%d series, %v", n, err)
			}
			mfs, _ := reg.Gather()
			for _, m := range mfs[0].GetMetric() {
				if m.GetLabel()[0].GetValue() == "etag_md5" && m.GetGauge().GetValue() != want {
					t.Errorf("etag_md5 %v, want %v", m.GetGauge().GetValue(), want)
				}
				// The front cannot fake an SSE-KMS store's multipart
				// uploads (s3store's TestProbe): only the plain store's
				// is known.
				if m.GetLabel()[0].GetValue() == "multipart_checksum" && tc.fault == s3server.FaultNone && m.GetGauge().GetValue() != 1 {
					t.Errorf("multipart_checksum %v, want 1", m.GetGauge().GetValue())
				}
			}
			if tc.fault == s3server.FaultNone && (!b.MultipartCapable() || !strings.Contains(logs.String(), `"multipart"=true`)) {
				t.Errorf("multipart uploads not chosen on a store that keeps their checksum; log:\n%s", logs.String())
			}
		})
	}
}
