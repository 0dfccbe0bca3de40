package storetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// S3 is a real S3 server (test/framework/s3server: versitygw or SeaweedFS) on
// loopback, shared by a test binary's tests.
type S3 struct {
	Impl           s3server.Impl
	Endpoint       string
	Access, Secret string
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
	store *S3
	dir   string
	err   error
}

var servers = map[s3server.Impl]*shared{}

func init() {
	for _, impl := range s3server.Impls {
		servers[impl] = &shared{}
	}
}

// Main runs a test binary that starts S3 servers (call it from TestMain)
// and stops them after its tests.
func Main(m *testing.M) {
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

// StartS3 returns impl's shared server, starting it on first use. Without
// the binary the test fails on CI (CI=true) and is skipped elsewhere.
func StartS3(t *testing.T, impl s3server.Impl) *S3 {
	t.Helper()
	s := servers[impl]
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "tether-store-"+impl.String()+"-"); s.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if s.srv, s.err = s3server.Start(ctx, s3server.Options{Impl: impl, Dir: s.dir, AccessKey: s3Access, SecretKey: s3Secret}); s.err == nil {
			s.store = &S3{Impl: impl, Endpoint: s.srv.Endpoint, Access: s3Access, Secret: s3Secret}
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

// EachS3 runs f in a subtest per S3 implementation.
func EachS3(t *testing.T, f func(t *testing.T, v *S3)) {
	for _, impl := range s3server.Impls {
		t.Run(impl.String(), func(t *testing.T) { f(t, StartS3(t, impl)) })
	}
}

// NewBackend returns an S3Backend on a new, empty bucket.
func (v *S3) NewBackend(t *testing.T, prefix string) *s3store.S3Backend {
	t.Helper()
	b, err := s3store.NewS3Backend(s3store.S3Options{
		Endpoint:  v.Endpoint,
		AccessKey: v.Access,
		SecretKey: v.Secret,
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

// NewFrontedBackend returns an S3Backend on a new, empty bucket reached
// through a Front (test/framework/s3server) with fault, which the test may change.
func (v *S3) NewFrontedBackend(t *testing.T, fault s3server.Fault) (*s3store.S3Backend, *s3server.Front) {
	t.Helper()
	direct := v.NewBackend(t, "")
	f, err := s3server.NewFront(v.Endpoint, fault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	f.Resign(v.Access, v.Secret)
	b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: f.Endpoint, AccessKey: v.Access, SecretKey: v.Secret, Region: "us-east-1", Bucket: direct.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	return b, f
}
