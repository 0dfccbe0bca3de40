package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
)

// staleTempAge is how old a temporary file of the fs backend must be to count
// as a crashed writer's leftover: a PUT in progress writes to its file at
// least once per upload stall timeout (a minute), so it is never this old.
const staleTempAge = time.Hour

// artifactBackend builds the configured artifact store.
func artifactBackend(opts Options, log logr.Logger) (upload.Backend, error) {
	if opts.ArtifactBackend == "fs" {
		if err := os.MkdirAll(opts.ArtifactDir, 0o750); err != nil {
			return nil, fmt.Errorf("--artifact-dir: %w", err)
		}
		b, err := fsstore.NewFSBackend(opts.ArtifactDir)
		if err != nil {
			return nil, fmt.Errorf("--artifact-dir: %w", err)
		}
		// Not fatal: leftovers only take space, and the next start tries again.
		if err := b.RemoveStaleTemp(staleTempAge); err != nil {
			log.Error(err, "removing stale temporary files", "dir", opts.ArtifactDir)
		}
		return b, nil
	}
	var access, secret string
	if dir := opts.S3.CredentialsDir; dir != "" {
		a, err := os.ReadFile(filepath.Join(dir, "access-key"))
		if err != nil {
			return nil, fmt.Errorf("--s3-credentials-dir: %w", err)
		}
		s, err := os.ReadFile(filepath.Join(dir, "secret-key"))
		if err != nil {
			return nil, fmt.Errorf("--s3-credentials-dir: %w", err)
		}
		access, secret = strings.TrimSpace(string(a)), strings.TrimSpace(string(s))
	}
	return s3store.NewS3Backend(s3store.S3Options{Endpoint: opts.S3.Endpoint, Secure: !opts.S3.Insecure, AccessKey: access, SecretKey: secret,
		Region: opts.S3.Region, Bucket: opts.S3.Bucket, Prefix: opts.S3.Prefix,
		PublicEndpoint: opts.S3.PublicEndpoint, PublicInsecure: opts.S3.Insecure,
		// Probed in the background (storeprobe.go): nothing is done before.
		AwaitProbe: true})
}
