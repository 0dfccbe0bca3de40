package endpoint

import (
	"testing"

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
