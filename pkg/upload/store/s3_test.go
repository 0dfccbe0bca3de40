package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/internal/s3server"
	"github.com/tether-dev/tether/pkg/upload"
)

// versity is a versitygw serving a posix directory on loopback.
type versity struct {
	endpoint       string
	access, secret string
	buckets        atomic.Int64
}

const (
	versityAccess = "tether-test-access"
	versitySecret = "tether-test-secret-0123456789"
)

// startVersityGW runs versitygw for the test's duration. Without the binary
// the test fails on CI (CI=true) and is skipped elsewhere.
func startVersityGW(t *testing.T) *versity {
	t.Helper()
	s, err := s3server.Start(context.Background(), s3server.Options{Dir: t.TempDir(), AccessKey: versityAccess, SecretKey: versitySecret})
	if errors.Is(err, s3server.ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("versitygw output:\n%s", s.Output())
		}
	})
	return &versity{endpoint: s.Endpoint, access: versityAccess, secret: versitySecret}
}

// newBackend returns an S3Backend on a new, empty bucket.
func (v *versity) newBackend(t *testing.T, prefix string) *S3Backend {
	t.Helper()
	b, err := NewS3Backend(S3Options{
		Endpoint:  v.endpoint,
		AccessKey: v.access,
		SecretKey: v.secret,
		Region:    "us-east-1",
		Bucket:    fmt.Sprintf("tether-test-%d", v.buckets.Add(1)),
		Prefix:    prefix,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Client.MakeBucket(context.Background(), b.Bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("creating bucket %s: %v", b.Bucket, err)
	}
	return b
}

// TestHandlerS3 runs the handler suite with the S3Backend on versitygw.
func TestHandlerS3(t *testing.T) {
	v := startVersityGW(t)
	runHandlerSuite(t, func(t *testing.T) upload.Backend { return v.newBackend(t, "") })
}

func TestS3BackendContract(t *testing.T) {
	v := startVersityGW(t)
	t.Run("NoPrefix", func(t *testing.T) {
		runBackendSuite(t, func(t *testing.T) upload.Backend { return v.newBackend(t, "") })
	})
	t.Run("Prefix", func(t *testing.T) {
		runBackendSuite(t, func(t *testing.T) upload.Backend { return v.newBackend(t, "tether/artifacts/") })
	})
}

func TestS3BackendPrefixIsolation(t *testing.T) {
	v := startVersityGW(t)
	ctx := context.Background()
	b := v.newBackend(t, "pre/")
	body := []byte("hello")
	if _, err := b.Put(ctx, "job/x", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	st, err := b.Client.StatObject(ctx, b.Bucket, "pre/job/x", minio.StatObjectOptions{})
	if err != nil || st.ETag != md5hex(body) {
		t.Fatalf("object under the prefix: %+v %v", st, err)
	}
	if _, err := b.Client.PutObject(ctx, b.Bucket, "elsewhere/job/y", bytes.NewReader(body), 5, minio.PutObjectOptions{DisableMultipart: true}); err != nil {
		t.Fatal(err)
	}
	keys, err := b.List(ctx, "")
	if err != nil || len(keys) != 1 || keys[0] != "job/x" {
		t.Fatalf("List: %q %v", keys, err)
	}
	if info, mod, err := b.Stat(ctx, "job/x"); err != nil || info.Size != 5 || time.Since(mod) > time.Hour {
		t.Fatalf("Stat: %+v %v %v", info, mod, err)
	}
}

func TestS3BackendUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b, err := NewS3Backend(S3Options{Endpoint: addr, AccessKey: "a", SecretKey: "b", Region: "us-east-1", Bucket: "x"})
	if err != nil {
		t.Fatal(err)
	}
	b.Client.SetAppInfo("tether-test", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Head(ctx, "job/x"); err == nil || strings.Contains(err.Error(), upload.ErrNotFound.Error()) {
		t.Fatalf("Head on a dead endpoint: %v, want a connection error", err)
	}
	if _, err := NewS3Backend(S3Options{Bucket: "x"}); err == nil {
		t.Fatal("NewS3Backend without an endpoint succeeded")
	}
}
