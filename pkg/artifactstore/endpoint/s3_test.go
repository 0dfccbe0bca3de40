package endpoint

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/upload"
)

// The S3 servers are shared by this binary's tests and stopped at its end.
func TestMain(m *testing.M) { storetest.Main(m) }

// TestHandlerS3 runs the handler suite with the S3Backend on each S3 server.
func TestHandlerS3(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		runHandlerSuite(t, func(t *testing.T) upload.Backend { return v.NewBackend(t, "") })
	})
}

// DirectTTL is what the sweep waits out: the URLs' lifetime whenever the
// backend presigns, whether or not direct uploads are on now.
func TestDirectTTL(t *testing.T) {
	if ttl := (&Handler{Backend: fsstore.FSBackend{Root: t.TempDir()}}).DirectTTL(); ttl != 0 {
		t.Fatalf("fs backend: DirectTTL %s, want 0 (it presigns nothing)", ttl)
	}
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		if ttl := (&Handler{Backend: v.NewBackend(t, ""), Direct: DirectOptions{TTL: 3 * time.Second, Disabled: true}}).DirectTTL(); ttl != 3*time.Second {
			t.Fatalf("s3 backend, direct uploads off: DirectTTL %s, want 3s (URLs from before still live)", ttl)
		}
	})
}
