package s3store_test

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
)

// The S3 servers are shared by this binary's tests and stopped at its end.
func TestMain(m *testing.M) { storetest.Main(m) }

func TestS3BackendContract(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		t.Run("NoPrefix", func(t *testing.T) {
			storetest.BackendSuite(t, func(t *testing.T) upload.Backend { return v.NewBackend(t, "") })
		})
		t.Run("Prefix", func(t *testing.T) {
			storetest.BackendSuite(t, func(t *testing.T) upload.Backend { return v.NewBackend(t, "tether/artifacts/") })
		})
	})
}

func TestS3BackendPrefixIsolation(t *testing.T) {
	storetest.EachS3(t, testS3BackendPrefixIsolation)
}

func testS3BackendPrefixIsolation(t *testing.T, v *storetest.S3) {
	ctx := context.Background()
	b := v.NewBackend(t, "pre/")
	body := []byte("hello")
	if _, err := b.Put(ctx, "job/x", bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	st, err := b.Client.StatObject(ctx, b.Bucket, "pre/job/x", minio.StatObjectOptions{})
	if err != nil || st.ETag != storetest.MD5Hex(body) {
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
	b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: addr, AccessKey: "a", SecretKey: "b", Region: "us-east-1", Bucket: "x"})
	if err != nil {
		t.Fatal(err)
	}
	b.Client.SetAppInfo("tether-test", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Head(ctx, "job/x"); err == nil || strings.Contains(err.Error(), upload.ErrNotFound.Error()) {
		t.Fatalf("Head on a dead endpoint: %v, want a connection error", err)
	}
	if _, err := s3store.NewS3Backend(s3store.S3Options{Bucket: "x"}); err == nil {
		t.Fatal("NewS3Backend without an endpoint succeeded")
	}
}
