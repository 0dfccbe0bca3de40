package store

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/upload"
)

// versitygwBinary returns the versitygw built by hack/testbin.sh. Without
// it the test fails on CI (CI=true) and is skipped elsewhere.
func versitygwBinary(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dir := ""
	if out, err := exec.Command("bash", filepath.Join(repo, "hack", "testbin.sh"), "--print-dir").Output(); err == nil {
		dir = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("versitygw not found at %q: build it with `bash hack/testbin.sh versitygw`", bin)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// syncBuffer collects a subprocess's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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

// startVersityGW runs versitygw for the test's duration.
func startVersityGW(t *testing.T) *versity {
	t.Helper()
	bin := versitygwBinary(t)
	for attempt := 1; ; attempt++ {
		dir := t.TempDir()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		out := &syncBuffer{}
		cmd := exec.Command(bin, "--port", addr, "--access", versityAccess, "--secret", versitySecret, "--quiet", "posix", dir)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting versitygw: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		if waitListening(addr, exited, 15*time.Second) {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("versitygw output:\n%s", out.String())
				}
			})
			return &versity{endpoint: addr, access: versityAccess, secret: versitySecret}
		}
		stop()
		if attempt == 3 {
			t.Fatalf("versitygw did not start on %s:\n%s", addr, out.String())
		}
	}
}

func waitListening(addr string, exited <-chan struct{}, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
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
