package s3store_test

import (
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
)

// TestS3BackendMultipart runs the multipart contract against each S3
// server, on a backend that uses its probe's choice, with copies in parts
// from 5 MiB on.
func TestS3BackendMultipart(t *testing.T) {
	s3store.SetMaxCopySize(t, upload.MinPartSize)
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		storetest.MultipartSuite(t, func(t *testing.T) storetest.MultipartBackend {
			b := v.NewBackend(t, "tether/artifacts/")
			caps, err := b.Probe(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := caps.Choose()
			if err != nil {
				t.Fatal(err)
			}
			b.Use(ch)
			return b
		})
	})
}
