package s3server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ErrNoBinary says versitygw is not built.
var ErrNoBinary = errors.New("versitygw not found: build it with `bash hack/testbin.sh versitygw`")

// Binary is the versitygw hack/testbin.sh built: in $KUBEBUILDER_ASSETS,
// else in the directory the script prints.
func Binary() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "testbin.sh")
		out, err := exec.Command("bash", script, "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("%s --print-dir: %w", script, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	bin := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%w (looked for %s)", ErrNoBinary, bin)
	}
	return bin, nil
}

// Options configure a server.
type Options struct {
	// Binary is versitygw (default: Binary()).
	Binary string
	// Dir is the posix root the buckets live in (required).
	Dir string
	// AccessKey and SecretKey are the root credentials (required).
	AccessKey, SecretKey string
	// CertFile and KeyFile serve TLS; CAPEM must then trust the certificate
	// for 127.0.0.1 (the admin client uses it). Empty: plain HTTP.
	CertFile, KeyFile string
	CAPEM             []byte
	// Output receives the server's stdout and stderr (default: kept in
	// memory, see Server.Output).
	Output io.Writer
}

// Server is a running versitygw.
type Server struct {
	// Endpoint is host:port on 127.0.0.1.
	Endpoint string
	// Secure is true with TLS.
	Secure bool
	// Admin is a minio-go client with the root credentials.
	Admin *minio.Client

	cmd    *exec.Cmd
	exited chan struct{}
	out    *buffer
	once   sync.Once
}

// Start starts versitygw on a free loopback port (three tries, should the
// port be taken between picking and binding) and returns once it answers.
// The process dies with the caller even if that is killed (Linux).
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" || opts.AccessKey == "" || opts.SecretKey == "" {
		return nil, errors.New("s3server: Dir, AccessKey and SecretKey are required")
	}
	if opts.Binary == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	var lastErr error
	for range 3 {
		s, err := start(ctx, opts)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	args := []string{"--port", addr, "--access", opts.AccessKey, "--secret", opts.SecretKey, "--quiet", "--keep-alive"}
	if opts.CertFile != "" {
		args = append(args, "--cert", opts.CertFile, "--key", opts.KeyFile)
	}
	args = append(args, "posix", opts.Dir)
	s := &Server{Endpoint: addr, Secure: opts.CertFile != "", exited: make(chan struct{}), out: &buffer{}}
	s.cmd = exec.Command(opts.Binary, args...)
	var out io.Writer = s.out
	if opts.Output != nil {
		out = io.MultiWriter(s.out, opts.Output)
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting versitygw: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()

	transport := &http.Transport{}
	if s.Secure {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(opts.CAPEM)
		transport.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	if s.Admin, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, ""),
		Secure: s.Secure, Transport: transport, Region: "us-east-1"}); err != nil {
		s.Stop()
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("versitygw exited on %s:\n%s", addr, s.Output())
		default:
		}
		if _, err := s.Admin.ListBuckets(ctx); err == nil {
			return s, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("versitygw on %s not answering: %v\n%s", addr, err, s.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Output is what the server printed.
func (s *Server) Output() string { return s.out.String() }

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
}

// MakeBucket creates a bucket; with anonymous, unsigned requests may PUT,
// GET and HEAD its objects (what Tether's binding endpoint allows a valid
// token, which versitygw does not check).
func (s *Server) MakeBucket(ctx context.Context, name string, anonymous bool) error {
	if err := s.Admin.MakeBucket(ctx, name, minio.MakeBucketOptions{}); err != nil {
		return fmt.Errorf("creating bucket %s: %w", name, err)
	}
	if !anonymous {
		return nil
	}
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":["s3:PutObject","s3:GetObject"],"Resource":["arn:aws:s3:::%s/*"]}]}`, name)
	if err := s.Admin.SetBucketPolicy(ctx, name, policy); err != nil {
		return fmt.Errorf("bucket policy of %s: %w", name, err)
	}
	return nil
}

// buffer collects the server's output.
type buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
