package controlplane

import (
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
)

// With --artifact-read-redirect=false the read endpoint gets a backend that
// can open objects but not presign them, so it streams (reads.go: a
// Presigner is redirected to).
func TestStreamedReadsHidePresigning(t *testing.T) {
	b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: "tether-artifacts.tether-system.svc:7070", Bucket: "tether-artifacts", Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	var backend upload.Backend = b
	if _, ok := backend.(objects.Presigner); !ok {
		t.Fatal("the s3 backend no longer presigns: this test proves nothing")
	}
	var reads upload.Backend = streamed{Backend: b, Opener: b}
	if _, ok := reads.(objects.Presigner); ok {
		t.Error("streamed still presigns: reads would be redirected to the store")
	}
	if _, ok := reads.(objects.Opener); !ok {
		t.Error("streamed cannot open objects: reads would fail with no_reader")
	}
}
