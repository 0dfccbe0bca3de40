package s3store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// A probe cut short (its replica killed) leaves its multipart upload open:
// the next probe aborts it once it is far older than any probe runs, and
// leaves a recent one (another replica's probe in flight) alone.
func TestProbeAbortsStaleProbeMultipartUploads(t *testing.T) {
	v := storetest.StartS3(t, s3server.VersityGW)
	b := v.NewBackend(t, "")
	stale := s3store.ProbePrefix + "20200101T000000Z-0123456789abcdef/multipart"
	recent := s3store.ProbePrefix + time.Now().UTC().Format("20060102T150405Z") + "-fedcba9876543210/multipart"
	for _, k := range []string{stale, recent} {
		if _, err := b.CreateMultipart(t.Context(), k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Probe(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	ups, err := b.ListMultipartUploads(t.Context(), s3store.ProbePrefix)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, u := range ups {
		keys = append(keys, u.Key)
	}
	if strings.Join(keys, ",") != recent {
		t.Fatalf("open probe uploads after a probe: %q, want only the recent one %q", keys, recent)
	}
}
