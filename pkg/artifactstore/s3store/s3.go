package s3store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// S3Backend stores objects in an S3 bucket through minio-go: key k is the
// object Prefix+k of Bucket. Put is a single PUT with its size known, so
// its ETag is its MD5 where the bucket does not use SSE-KMS or SSE-C
// (there the store's CRC-64/NVME verifies it: Choice.Verification). A
// larger object is stored in parts (objects.Multiparter, multipart.go)
// where the probe found the store keeps their full-object CRC-64/NVME.
type S3Backend struct {
	Client *minio.Client
	Bucket string
	// Prefix is prepended to every key, e.g. "tether/" (may be empty).
	// Keys then grow by len(Prefix): S3's 1024-byte key limit applies to
	// the whole name.
	Prefix string
	// Public, if set, signs the presigned PUT URLs of direct uploads for
	// the endpoint sidecars reach (S3Options.PublicEndpoint).
	Public *minio.Client

	// transport is the client's (S3Options.Transport), for the probe's
	// presigned PUT; choice is what the probe allowed (Use), set once,
	// possibly while requests are served (a control plane probes in the
	// background).
	transport http.RoundTripper
	choice    atomic.Pointer[Choice]
	// probed is closed by Use; with awaitProbe (S3Options.AwaitProbe)
	// every request but the probe's own waits for it (probegate.go).
	probed     chan struct{}
	probedOnce sync.Once
	awaitProbe bool
}

var _ upload.Backend = (*S3Backend)(nil)
var _ objects.Stater = (*S3Backend)(nil)

// S3Options configure NewS3Backend.
type S3Options struct {
	// Endpoint is host[:port], without scheme.
	Endpoint string
	// Secure selects HTTPS.
	Secure bool
	// AccessKey and SecretKey sign requests (Signature V4).
	AccessKey, SecretKey string
	// Region; empty lets minio-go ask the bucket's location.
	Region string
	// VirtualHost selects virtual-host-style requests; the default is
	// path-style (bucket in the path), which S3-compatible servers expect.
	VirtualHost bool
	Bucket      string
	Prefix      string
	// Transport overrides minio-go's (custom CA, proxies).
	Transport http.RoundTripper
	// PublicEndpoint is host[:port] of the store as sidecars reach it, if
	// not Endpoint: presigned PUT URLs (direct uploads) name it. Requires
	// Region. PublicInsecure selects plain HTTP for it.
	PublicEndpoint string
	PublicInsecure bool
	// AwaitProbe makes every request but the start-up probe's wait, at
	// most ProbeWait, until Use was called, and fail with ErrNotProbed
	// after that: a control plane serves its sessions while it probes the
	// store, and nothing is written under a guess of what the store does.
	AwaitProbe bool
}

func credsOf(o S3Options) *credentials.Credentials {
	return credentials.NewStaticV4(o.AccessKey, o.SecretKey, "")
}

// NewS3Backend returns an S3Backend for o. It does not contact the server.
func NewS3Backend(o S3Options) (*S3Backend, error) {
	if o.Endpoint == "" || o.Bucket == "" {
		return nil, errors.New("S3 backend: the endpoint and the bucket are required")
	}
	lookup := minio.BucketLookupPath
	if o.VirtualHost {
		lookup = minio.BucketLookupDNS
	}
	b := &S3Backend{Bucket: o.Bucket, Prefix: o.Prefix, transport: o.Transport, probed: make(chan struct{}), awaitProbe: o.AwaitProbe}
	transport := o.Transport
	if o.AwaitProbe {
		if transport == nil {
			t, err := minio.DefaultTransport(o.Secure)
			if err != nil {
				return nil, fmt.Errorf("S3 backend: %w", err)
			}
			transport = t
		}
		transport = probeGate{next: transport, b: b}
	}
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds:        credsOf(o),
		Secure:       o.Secure,
		Region:       o.Region,
		BucketLookup: lookup,
		Transport:    transport,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 backend: %w", err)
	}
	b.Client = c
	if o.PublicEndpoint != "" {
		if b.Public, err = publicClient(o, lookup); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *S3Backend) name(key string) string { return b.Prefix + key }

// notFound reports whether err is S3's "no such object".
func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == minio.NoSuchKey || r.StatusCode == http.StatusNotFound && r.Code != minio.NoSuchBucket
}

// Put stores exactly size bytes of body in a single PUT and returns the ETag
// the server reports.
//
// A PUT whose body fails or ends early must not leave an object behind. S3
// guarantees that for a body shorter than its Content-Length, but some
// S3-compatible servers commit whatever arrived before the connection
// closed (versitygw v1.8.0, versity/versitygw#2414). So when the body fails,
// or ctx ends, while the request is in flight, Put resets the TCP
// connection (SO_LINGER 0) instead of closing it: the server reads an error,
// not an end of stream, and keeps nothing.
func (b *S3Backend) Put(ctx context.Context, key string, body io.Reader, size int64) (upload.ObjectInfo, error) {
	// The CRC-64/NVME goes in a trailer unless the probe found the store
	// refuses trailers (checksum.go).
	c, err := b.chosen(ctx)
	if err != nil {
		return upload.ObjectInfo{}, err
	}
	return b.put(ctx, key, body, size, !c.NoTrailer)
}

// putBody is a PUT's body: it stops at size bytes, turns an early end into
// an error, and on any failure resets the request's connection.
type putBody struct {
	r    io.Reader
	size int64
	n    int64

	mu      sync.Mutex
	conn    net.Conn
	aborted error
}

func (p *putBody) Read(b []byte) (int, error) {
	if err := p.abortErr(); err != nil {
		return 0, err
	}
	if p.n >= p.size {
		return 0, io.EOF
	}
	if rest := p.size - p.n; int64(len(b)) > rest {
		b = b[:rest]
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	switch {
	case err == io.EOF && p.n < p.size:
		err = fmt.Errorf("the body ended after %d of %d bytes", p.n, p.size)
		p.abort(err)
	case err != nil && err != io.EOF:
		p.abort(err)
	}
	return n, err
}

func (p *putBody) abortErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.aborted
}

func (p *putBody) gotConn(info httptrace.GotConnInfo) {
	p.mu.Lock()
	p.conn = info.Conn
	aborted := p.aborted != nil
	p.mu.Unlock()
	if aborted {
		resetConn(info.Conn)
	}
}

// abort records why the PUT failed and resets its connection, if any.
func (p *putBody) abort(err error) {
	p.mu.Lock()
	if p.aborted == nil {
		p.aborted = err
	}
	c := p.conn
	p.mu.Unlock()
	if c != nil {
		resetConn(c)
	}
}

// resetConn closes an HTTP/1 connection with a TCP reset. An HTTP/2
// connection is shared by other requests and left alone: HTTP/2 aborts a
// request with a stream reset, which no server takes for a complete body.
func resetConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			return
		}
		c = tc.NetConn()
	}
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		_ = l.SetLinger(0)
	}
	_ = c.Close()
}

// Head returns the object's size and ETag.
func (b *S3Backend) Head(ctx context.Context, key string) (upload.ObjectInfo, error) {
	info, _, err := b.Stat(ctx, key)
	return info, err
}

// Stat returns the object's size, ETag and modification time.
func (b *S3Backend) Stat(ctx context.Context, key string) (upload.ObjectInfo, time.Time, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return upload.ObjectInfo{}, time.Time{}, err
	}
	// With the store's own checksum (x-amz-checksum-mode: ENABLED).
	oi, err := b.Client.StatObject(ctx, b.Bucket, b.name(key), minio.StatObjectOptions{Checksum: true})
	if err != nil {
		if notFound(err) {
			return upload.ObjectInfo{}, time.Time{}, upload.ErrNotFound
		}
		return upload.ObjectInfo{}, time.Time{}, fmt.Errorf("S3 HEAD %s: %w", b.name(key), markSlowDown(err))
	}
	return upload.ObjectInfo{Size: oi.Size, ETag: strings.ToLower(oi.ETag), CRC64NVME: oi.ChecksumCRC64NVME}, oi.LastModified, nil
}

// Copy replaces dst with src by a server-side copy: one request up to
// 5 GiB, a copy in parts above (copy_parts.go).
func (b *S3Backend) Copy(ctx context.Context, src, dst string) error {
	if err := b.awaitProbed(ctx); err != nil {
		return err
	}
	if done, err := b.copyLarge(ctx, src, dst, objects.CopyCond{}); done || err != nil {
		return err
	}
	_, err := b.Client.CopyObject(ctx,
		minio.CopyDestOptions{Bucket: b.Bucket, Object: b.name(dst)},
		minio.CopySrcOptions{Bucket: b.Bucket, Object: b.name(src)})
	if err != nil {
		if notFound(err) {
			return fmt.Errorf("S3 copy %s: %w", b.name(src), upload.ErrNotFound)
		}
		return fmt.Errorf("S3 copy %s to %s: %w", b.name(src), b.name(dst), markSlowDown(err))
	}
	return nil
}

// Delete removes the object; a missing object is not an error.
func (b *S3Backend) Delete(ctx context.Context, key string) error {
	if err := b.awaitProbed(ctx); err != nil {
		return err
	}
	err := b.Client.RemoveObject(ctx, b.Bucket, b.name(key), minio.RemoveObjectOptions{})
	if err != nil && !notFound(err) {
		return fmt.Errorf("S3 DELETE %s: %w", b.name(key), markSlowDown(err))
	}
	return nil
}

// List returns the keys starting with prefix, in S3's (byte) order.
func (b *S3Backend) List(ctx context.Context, prefix string) ([]string, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var keys []string
	for oi := range b.Client.ListObjects(ctx, b.Bucket, minio.ListObjectsOptions{Prefix: b.name(prefix), Recursive: true}) {
		if oi.Err != nil {
			return nil, fmt.Errorf("S3 LIST %s: %w", b.name(prefix), oi.Err)
		}
		keys = append(keys, strings.TrimPrefix(oi.Key, b.Prefix))
	}
	return keys, nil
}

// markSlowDown marks S3's "slow down" answers (503 SlowDown, ServiceUnavailable)
// with objects.ErrSlowDown, so they reach the sidecar as a 503 with Retry-After and
// not as an internal error.
func markSlowDown(err error) error {
	r := minio.ToErrorResponse(err)
	if r.Code == "SlowDown" || r.Code == "ServiceUnavailable" || r.StatusCode == http.StatusServiceUnavailable {
		return fmt.Errorf("%w: %w", objects.ErrSlowDown, err)
	}
	return err
}
