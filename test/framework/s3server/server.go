package s3server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ErrNoBinary says the server's binary is not built (the error wrapping it
// names the hack/testbin.sh component that builds it).
var ErrNoBinary = errors.New("S3 server not built")

// Impl is an S3 server implementation the package runs.
type Impl int

const (
	// VersityGW is versitygw with its posix backend (the zero value).
	VersityGW Impl = iota
	// SeaweedFS is `weed server` (master, volume server, filer and S3
	// gateway in one process).
	SeaweedFS
)

// Impls are every implementation, for tests that run against each.
var Impls = []Impl{VersityGW, SeaweedFS}

// String is the implementation's name, as subtests are named.
func (i Impl) String() string {
	switch i {
	case VersityGW:
		return "versitygw"
	case SeaweedFS:
		return "seaweedfs"
	}
	return fmt.Sprintf("Impl(%d)", int(i))
}

// ParseImpl is the implementation String names ("" is versitygw).
func ParseImpl(name string) (Impl, error) {
	if name == "" {
		return VersityGW, nil
	}
	for _, i := range Impls {
		if i.String() == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("unknown S3 server %q (known: %v)", name, Impls)
}

// binary is the executable's name in the assets directory, component the
// hack/testbin.sh component that builds it.
func (i Impl) binary() (name, component string) {
	if i == SeaweedFS {
		return "weed", "seaweedfs"
	}
	return "versitygw", "versitygw"
}

// Binary is the versitygw hack/testbin.sh built.
func Binary() (string, error) { return VersityGW.Binary() }

// Binary is the implementation's executable hack/testbin.sh built: in
// $KUBEBUILDER_ASSETS, else in the directory the script prints.
func (i Impl) Binary() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "..", "..", "hack", "testbin.sh")
		out, err := exec.Command("bash", script, "--print-dir").Output()
		if err != nil {
			return "", fmt.Errorf("%s --print-dir: %w", script, err)
		}
		dir = strings.TrimSpace(string(out))
	}
	return i.BinaryIn(dir)
}

// BinaryIn is the implementation's executable in an assets directory.
func (i Impl) BinaryIn(dir string) (string, error) {
	name, component := i.binary()
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%w: %s not found: build it with `bash hack/testbin.sh %s` (looked for %s)", ErrNoBinary, name, component, bin)
	}
	return bin, nil
}

// Options configure a server.
type Options struct {
	// Impl is the implementation (default: VersityGW).
	Impl Impl
	// Binary is the implementation's executable (default: Impl.Binary()).
	Binary string
	// Dir is the server's own directory: versitygw's posix root, SeaweedFS's
	// data, configuration and sockets (required).
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

// Server is a running S3 server.
type Server struct {
	// Impl is the implementation.
	Impl Impl
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
	// grace is how long Stop waits after SIGTERM before SIGKILL (0: kill
	// at once); cleanup runs after the process is gone.
	grace   time.Duration
	cleanup func()
}

// launch is how one implementation is started on free ports: its command
// line and environment, the S3 endpoint, and what readiness needs beyond
// the S3 API answering.
type launch struct {
	args, env []string
	endpoint  string
	ready     func(ctx context.Context, s *Server) error
	grace     time.Duration
	cleanup   func()
}

// Start starts the server on free loopback ports (three tries, should a
// port be taken between picking and binding) and returns once it answers
// and can store objects. The process dies with the caller even if that is
// killed (Linux).
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" || opts.AccessKey == "" || opts.SecretKey == "" {
		return nil, errors.New("s3server: Dir, AccessKey and SecretKey are required")
	}
	if opts.Binary == "" {
		bin, err := opts.Impl.Binary()
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	var lastErr error
	for range 3 {
		var l launch
		var err error
		switch opts.Impl {
		case VersityGW:
			l, err = versityLaunch(opts)
		case SeaweedFS:
			l, err = seaweedLaunch(opts)
		default:
			return nil, fmt.Errorf("s3server: unknown implementation %v", opts.Impl)
		}
		if err != nil {
			return nil, err
		}
		s, err := start(ctx, opts, l)
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

func start(ctx context.Context, opts Options, l launch) (*Server, error) {
	s := &Server{Impl: opts.Impl, Endpoint: l.endpoint, Secure: opts.CertFile != "", exited: make(chan struct{}), out: &buffer{},
		grace: l.grace, cleanup: l.cleanup}
	s.cmd = exec.Command(opts.Binary, l.args...)
	s.cmd.Dir = opts.Dir
	if l.env != nil {
		s.cmd.Env = append(os.Environ(), l.env...)
	}
	var out io.Writer = s.out
	if opts.Output != nil {
		out = io.MultiWriter(s.out, opts.Output)
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		if l.cleanup != nil {
			l.cleanup()
		}
		return nil, fmt.Errorf("starting %v: %w", opts.Impl, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()

	transport := &http.Transport{}
	if s.Secure {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(opts.CAPEM)
		transport.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	var err error
	if s.Admin, err = minio.New(l.endpoint, &minio.Options{Creds: credentials.NewStaticV4(opts.AccessKey, opts.SecretKey, ""),
		Secure: s.Secure, Transport: transport, Region: "us-east-1"}); err != nil {
		s.Stop()
		return nil, err
	}
	// SeaweedFS needs a while (raft, volume server, filer); a loaded
	// 2-core machine makes it longer.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.exited:
			s.Stop()
			return nil, fmt.Errorf("%v exited on %s:\n%s", opts.Impl, l.endpoint, s.Output())
		default:
		}
		err := func() error {
			if _, err := s.Admin.ListBuckets(ctx); err != nil {
				return err
			}
			if l.ready != nil {
				return l.ready(ctx, s)
			}
			return nil
		}()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("%v on %s not ready: %v\n%s", opts.Impl, l.endpoint, err, s.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Output is what the server printed.
func (s *Server) Output() string { return s.out.String() }

// Stop ends the server (SIGTERM and a grace period where the
// implementation cleans up after itself, else SIGKILL) and waits for it.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.grace > 0 {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(s.grace):
			}
		}
		_ = s.cmd.Process.Kill()
		<-s.exited
		if s.cleanup != nil {
			s.cleanup()
		}
	})
}

// MakeBucket creates a bucket; with anonymous, unsigned requests may PUT,
// GET and HEAD its objects (what Tether's binding endpoint allows a valid
// token, which the S3 server does not check).
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
