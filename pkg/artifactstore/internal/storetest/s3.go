package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/internal/s3server"
	"github.com/tether-dev/tether/pkg/upload"
)

// s3Store is a real S3 server (internal/s3server: versitygw or SeaweedFS)
// on loopback.
type s3Store struct {
	impl           s3server.Impl
	endpoint       string
	access, secret string
	buckets        atomic.Int64
}

const (
	s3Access = "tether-test-access"
	s3Secret = "tether-test-secret-0123456789"
)

// shared is one implementation's server, started by the first test that
// needs it and stopped by TestMain: SeaweedFS takes 8-11 s to start (its
// filer waits out a membership check before it takes writes), and every
// test works in buckets of its own.
type shared struct {
	once  sync.Once
	srv   *s3server.Server
	store *s3Store
	dir   string
	err   error
}

var servers = map[s3server.Impl]*shared{}

func init() {
	for _, impl := range s3server.Impls {
		servers[impl] = &shared{}
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range servers {
		if s.srv != nil {
			s.srv.Stop()
		}
		if s.dir != "" {
			_ = os.RemoveAll(s.dir)
		}
	}
	os.Exit(code)
}

// startS3 returns impl's shared server, starting it on first use. Without
// the binary the test fails on CI (CI=true) and is skipped elsewhere.
func startS3(t *testing.T, impl s3server.Impl) *s3Store {
	t.Helper()
	s := servers[impl]
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "tether-store-"+impl.String()+"-"); s.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if s.srv, s.err = s3server.Start(ctx, s3server.Options{Impl: impl, Dir: s.dir, AccessKey: s3Access, SecretKey: s3Secret}); s.err == nil {
			s.store = &s3Store{impl: impl, endpoint: s.srv.Endpoint, access: s3Access, secret: s3Secret}
		}
	})
	if errors.Is(s.err, s3server.ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skip(s.err)
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out := s.srv.Output()
			if len(out) > 16<<10 {
				out = "...\n" + out[len(out)-16<<10:]
			}
			t.Logf("%v output:\n%s", impl, out)
		}
	})
	return s.store
}

// eachS3 runs f in a subtest per S3 implementation.
func eachS3(t *testing.T, f func(t *testing.T, v *s3Store)) {
	for _, impl := range s3server.Impls {
		t.Run(impl.String(), func(t *testing.T) { f(t, startS3(t, impl)) })
	}
}

// newBackend returns an S3Backend on a new, empty bucket.
func (v *s3Store) newBackend(t *testing.T, prefix string) *S3Backend {
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

// TestHandlerS3 runs the handler suite with the S3Backend on each S3 server.
func TestHandlerS3(t *testing.T) {
	eachS3(t, func(t *testing.T, v *s3Store) {
		runHandlerSuite(t, func(t *testing.T) upload.Backend { return v.newBackend(t, "") })
	})
}

func TestS3BackendContract(t *testing.T) {
	eachS3(t, func(t *testing.T, v *s3Store) {
		t.Run("NoPrefix", func(t *testing.T) {
			runBackendSuite(t, func(t *testing.T) upload.Backend { return v.newBackend(t, "") })
		})
		t.Run("Prefix", func(t *testing.T) {
			runBackendSuite(t, func(t *testing.T) upload.Backend { return v.newBackend(t, "tether/artifacts/") })
		})
	})
}

func TestS3BackendPrefixIsolation(t *testing.T) {
	eachS3(t, testS3BackendPrefixIsolation)
}

func testS3BackendPrefixIsolation(t *testing.T, v *s3Store) {
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
