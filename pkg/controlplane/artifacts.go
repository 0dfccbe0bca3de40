package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/pkg/upload/store"
)

// artifactBackend builds the configured artifact store.
func artifactBackend(opts Options) (upload.Backend, error) {
	if opts.ArtifactBackend == "fs" {
		if err := os.MkdirAll(opts.ArtifactDir, 0o750); err != nil {
			return nil, fmt.Errorf("--artifact-dir: %w", err)
		}
		return store.FSBackend{Root: opts.ArtifactDir}, nil
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
	return store.NewS3Backend(store.S3Options{Endpoint: opts.S3.Endpoint, Secure: !opts.S3.Insecure, AccessKey: access, SecretKey: secret,
		Region: opts.S3.Region, Bucket: opts.S3.Bucket, Prefix: opts.S3.Prefix})
}
