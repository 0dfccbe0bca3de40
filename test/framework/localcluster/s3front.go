package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// s3Front stands between the artifact store and every client of it but the
// test's own admin client (the control plane, and sidecars given presigned
// URLs): a loopback HTTP reverse proxy that counts what reaches the store
// and, while failing, answers every request 503 SlowDown, as S3 does when it
// sheds load. The request's Host is kept, so SigV4 signatures made for the
// front's address still verify at the store. While stalling, every PUT
// body stops flowing once its first bytes have passed, until the stall ends
// (a store that hangs mid-body: the client sees a connection that neither
// reads nor answers).
type s3Front struct {
	ln      net.Listener
	srv     *http.Server
	failing atomic.Bool
	// stalled is closed when the current stall ends (nil: not stalling).
	stalled atomic.Pointer[chan struct{}]

	mu      sync.Mutex
	traffic S3Traffic
}

// S3Traffic is what the store was sent through the front.
type S3Traffic struct {
	// Puts is how many object PUTs with a body reached the store, and
	// PutBytes how many body bytes they carried so far (also of a PUT in
	// flight or cut off).
	Puts     int
	PutBytes int64
	// Copies is how many server-side copies (PUT with x-amz-copy-source).
	Copies int
	// Refused is how many requests the front answered 503 while failing.
	Refused int
	// Stalled is how many times a PUT body was held mid-body by a stall.
	Stalled int
	// ByPath is per request path (/<bucket>/<key>, of PUTs with a body).
	ByPath map[string]PathTraffic
}

// PathTraffic is the PUTs with a body one path was sent.
type PathTraffic struct {
	Puts  int
	Bytes int64
	// Parts is how many of Puts were parts of a multipart upload
	// (?partNumber=&uploadId=: the binding server stores a large body in
	// parts), and Uploads how many multipart uploads of the path were
	// started (POST ?uploads).
	Parts, Uploads int
	// Size is the Content-Length of the path's last PUT of a whole object
	// (a part's is not the object's size).
	Size int64
	// CopiedTo is where the object was copied server-side (a direct
	// upload's object committed to its key), if it was.
	CopiedTo string
}

// Since is what t added to before.
func (t S3Traffic) Since(before S3Traffic) S3Traffic {
	d := S3Traffic{Puts: t.Puts - before.Puts, PutBytes: t.PutBytes - before.PutBytes, Copies: t.Copies - before.Copies,
		Refused: t.Refused - before.Refused, Stalled: t.Stalled - before.Stalled, ByPath: map[string]PathTraffic{}}
	for p, pt := range t.ByPath {
		b := before.ByPath[p]
		if pt.Puts != b.Puts || pt.Bytes != b.Bytes || pt.Uploads != b.Uploads || pt.CopiedTo != b.CopiedTo {
			d.ByPath[p] = PathTraffic{Puts: pt.Puts - b.Puts, Bytes: pt.Bytes - b.Bytes, Parts: pt.Parts - b.Parts, Uploads: pt.Uploads - b.Uploads,
				Size: pt.Size, CopiedTo: pt.CopiedTo}
		}
	}
	return d
}

func (t S3Traffic) String() string {
	return fmt.Sprintf("%d PUTs (%d bytes), %d copies, %d refused, %d stalled", t.Puts, t.PutBytes, t.Copies, t.Refused, t.Stalled)
}

func newS3Front(host, store string) (*s3Front, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	f := &s3Front{ln: ln, traffic: S3Traffic{ByPath: map[string]PathTraffic{}}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", store
			pr.Out.Host = pr.In.Host // what the client signed
		},
	}
	f.srv = &http.Server{Handler: f.handler(proxy), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// Addr is the front's host:port: the store's endpoint for its clients.
func (f *s3Front) Addr() string { return f.ln.Addr().String() }

func (f *s3Front) setFailing(on bool) { f.failing.Store(on) }

// setStalling starts or ends a stall: bodies in flight and new ones stop
// after their first bytes until it ends.
func (f *s3Front) setStalling(on bool) {
	if on {
		ch := make(chan struct{})
		f.stalled.CompareAndSwap(nil, &ch)
		return
	}
	if ch := f.stalled.Swap(nil); ch != nil {
		close(*ch)
	}
}

// stall blocks while the front stalls, or until ctx ends.
func (f *s3Front) stall(ctx context.Context) {
	if ch := f.stalled.Load(); ch != nil {
		f.mu.Lock()
		f.traffic.Stalled++
		f.mu.Unlock()
		select {
		case <-*ch:
		case <-ctx.Done():
		}
	}
}

func (f *s3Front) snapshot() S3Traffic {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.traffic
	t.ByPath = make(map[string]PathTraffic, len(f.traffic.ByPath))
	for p, pt := range f.traffic.ByPath {
		t.ByPath[p] = pt
	}
	return t
}

func (f *s3Front) close() { _ = f.srv.Close() }

func (f *s3Front) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.failing.Load() {
			f.mu.Lock()
			f.traffic.Refused++
			f.mu.Unlock()
			// Read the body first, so the client gets the answer rather
			// than a reset connection.
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 2<<30))
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><Resource>%s</Resource><RequestId>tether-e2e-s3-front</RequestId></Error>`,
				r.URL.Path)
			return
		}
		switch {
		case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
			src, _ := url.PathUnescape(r.Header.Get("X-Amz-Copy-Source"))
			src = "/" + strings.TrimPrefix(src, "/")
			f.mu.Lock()
			f.traffic.Copies++
			if pt, ok := f.traffic.ByPath[src]; ok {
				pt.CopiedTo = r.URL.Path
				f.traffic.ByPath[src] = pt
			}
			f.mu.Unlock()
		case r.Method == http.MethodPost && r.URL.Query().Has("uploads"):
			f.mu.Lock()
			pt := f.traffic.ByPath[r.URL.Path]
			pt.Uploads++
			f.traffic.ByPath[r.URL.Path] = pt
			f.mu.Unlock()
		case r.Method == http.MethodPut && r.ContentLength != 0 && r.Body != nil:
			f.mu.Lock()
			f.traffic.Puts++
			pt := f.traffic.ByPath[r.URL.Path]
			pt.Puts++
			// An aws-chunked body (a streamed PUT with a trailing
			// checksum) is longer than the object by its framing: the
			// object's size is the decoded length, and only chunk data
			// counts as the object's bytes.
			chunked := r.Header.Get("X-Amz-Decoded-Content-Length") != ""
			size := r.ContentLength
			if chunked {
				size, _ = strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
			}
			if q := r.URL.Query(); q.Has("partNumber") && q.Has("uploadId") {
				pt.Parts++
			} else {
				pt.Size = size
			}
			f.traffic.ByPath[r.URL.Path] = pt
			f.mu.Unlock()
			cb := &countingBody{ReadCloser: r.Body, f: f, path: r.URL.Path, ctx: r.Context()}
			if chunked {
				cb.chunks = &chunkCounter{}
			}
			r.Body = cb
		}
		next.ServeHTTP(w, r)
	})
}

// countingBody counts the bytes read from a PUT's body as they pass, so a
// test sees an upload's progress; of an aws-chunked body (chunks set), the
// chunk data only.
type countingBody struct {
	io.ReadCloser
	f      *s3Front
	path   string
	ctx    context.Context
	chunks *chunkCounter
	read   bool // some of the body has passed (a stall holds it mid-body)
}

func (c *countingBody) Read(p []byte) (int, error) {
	if c.read {
		c.f.stall(c.ctx)
	}
	k, err := c.ReadCloser.Read(p)
	c.read = c.read || k > 0
	n := int64(k)
	if c.chunks != nil {
		n = c.chunks.data(p[:k])
	}
	if n > 0 {
		c.f.mu.Lock()
		c.f.traffic.PutBytes += n
		pt := c.f.traffic.ByPath[c.path]
		pt.Bytes += n
		c.f.traffic.ByPath[c.path] = pt
		c.f.mu.Unlock()
	}
	return k, err
}

// chunkCounter follows an aws-chunked body ("<hex size>[;ext]\r\n<data>\r\n"
// ..., a zero-size chunk, then trailers) and counts its chunk data.
type chunkCounter struct {
	header []byte // the chunk header read so far
	left   int64  // data bytes left in the current chunk
	crlf   int    // bytes of the CRLF after a chunk's data still to skip
	done   bool   // the zero-size chunk was read: the rest is trailers
}

func (c *chunkCounter) data(p []byte) int64 {
	var n int64
	for len(p) > 0 && !c.done {
		switch {
		case c.left > 0:
			k := min(int64(len(p)), c.left)
			n += k
			c.left -= k
			p = p[k:]
			if c.left == 0 {
				c.crlf = 2
			}
		case c.crlf > 0:
			c.crlf--
			p = p[1:]
		default:
			c.header = append(c.header, p[0])
			p = p[1:]
			if !bytes.HasSuffix(c.header, []byte("\r\n")) {
				continue
			}
			line := strings.TrimSuffix(string(c.header), "\r\n")
			c.header = c.header[:0]
			size, _, _ := strings.Cut(line, ";")
			v, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
			if err != nil || v == 0 {
				c.done = true
				break
			}
			c.left = v
		}
	}
	return n
}

// errNoS3 says the control plane runs with the fs backend.
var errNoS3 = errors.New("tether runs without S3 (TetherOptions.S3)")
