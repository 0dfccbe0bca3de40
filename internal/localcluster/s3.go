package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is a versitygw server (posix backend) on loopback, plain HTTP, with one
// bucket for Tether's artifacts.
type S3 struct {
	Endpoint       string // host:port
	Bucket         string
	CredentialsDir string // access-key, secret-key (what a mounted Secret gives the control plane)
	Admin          *minio.Client
}

const (
	s3AccessKey = "tether-e2e-access"
	s3SecretKey = "tether-e2e-secret-key-0123456789"
)

// StartS3 starts versitygw and creates the bucket "tether-artifacts".
func (c *Cluster) StartS3(ctx context.Context) (*S3, error) {
	data := filepath.Join(c.Dir, "s3-data")
	creds := filepath.Join(c.Dir, "s3-credentials")
	for _, d := range []string{data, creds} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(creds, "access-key"), []byte(s3AccessKey), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(creds, "secret-key"), []byte(s3SecretKey), 0o600); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := c.start("versitygw", c.bin("versitygw"), []string{"--port", addr, "--access", s3AccessKey, "--secret", s3SecretKey,
		"--quiet", "--keep-alive", "posix", data})
	if err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, p, addr, 30*time.Second); err != nil {
		return nil, err
	}
	s := &S3{Endpoint: addr, Bucket: "tether-artifacts", CredentialsDir: creds}
	if s.Admin, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(s3AccessKey, s3SecretKey, ""), Region: "us-east-1"}); err != nil {
		return nil, err
	}
	if err := c.retry(ctx, 20*time.Second, func() error { return s.Admin.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{}) }); err != nil {
		return nil, fmt.Errorf("creating bucket: %w (see %s)", err, p.LogFile)
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
