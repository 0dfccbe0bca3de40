package localcluster

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/test/framework/s3server"
)

// S3 is an S3 server (test/framework/s3server: versitygw's posix backend, or
// SeaweedFS) on loopback, plain HTTP, with one bucket for Tether's
// artifacts.
type S3 struct {
	Endpoint       string // host:port
	Bucket         string
	CredentialsDir string // access-key, secret-key (what a mounted Secret gives the control plane)
	Admin          *minio.Client
}

// S3Config is the store's bucket and root credentials, and the server.
type S3Config struct {
	Bucket, AccessKey, SecretKey string
	// Impl is the server (default: versitygw).
	Impl s3server.Impl
}

// DefaultS3Config is the store's configuration when no manifest gives one.
var DefaultS3Config = S3Config{Bucket: "tether-artifacts", AccessKey: "tether-e2e-access", SecretKey: "tether-e2e-secret-key-0123456789"}

// StartS3 starts cfg's S3 server with cfg's credentials and creates cfg's
// bucket.
func (c *Cluster) StartS3(ctx context.Context, cfg S3Config) (*S3, error) {
	data := filepath.Join(c.Dir, "s3-data")
	creds := filepath.Join(c.Dir, "s3-credentials")
	for _, d := range []string{data, creds} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(creds, "access-key"), []byte(cfg.AccessKey), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(creds, "secret-key"), []byte(cfg.SecretKey), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(c.logDir(), cfg.Impl.String()+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	bin, err := cfg.Impl.BinaryIn(c.Assets)
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	srv, err := s3server.Start(ctx, s3server.Options{Impl: cfg.Impl, Binary: bin, Dir: data, AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Output: logFile})
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	c.onStop(func() error { srv.Stop(); return logFile.Close() })
	s := &S3{Endpoint: srv.Endpoint, Bucket: cfg.Bucket, CredentialsDir: creds, Admin: srv.Admin}
	if err := srv.MakeBucket(ctx, s.Bucket, false); err != nil {
		return nil, err
	}
	return s, nil
}

// Get returns an object's content and ETag.
func (s *S3) Get(ctx context.Context, key string) ([]byte, string, error) {
	o, err := s.Admin.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, "", err
	}
	defer o.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, o); err != nil {
		return nil, "", err
	}
	st, err := o.Stat()
	if err != nil {
		return nil, "", err
	}
	return buf.Bytes(), st.ETag, nil
}

// List returns the keys under prefix with their last-modified times.
func (s *S3) List(ctx context.Context, prefix string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for o := range s.Admin.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		out[o.Key] = o.LastModified
	}
	return out, nil
}
