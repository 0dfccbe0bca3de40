package artifacts

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/sidecar/credentials"
	"github.com/tether-dev/tether/pkg/upload"
)

// DefaultDirectMinSize is the smallest file sent in direct mode: a smaller
// body costs the control plane little, and direct mode costs two more round
// trips (authorize, commit) than a proxied PUT.
const DefaultDirectMinSize = 1 << 20

// proxyRecheck is how long the Uploader keeps to proxy mode after the server
// answered proxy (or cannot authorize, an older server) or the store could
// not be reached, before it asks again.
const proxyRecheck = 10 * time.Minute

// direct is the Uploader's direct mode (docs/artifacts.md): authorize at the
// binding server, PUT to the store through the presigned URL, commit.
type direct struct {
	// api reaches the binding server (the token added); store reaches the
	// artifact store and carries no token.
	api, store *http.Client
	// commit reaches the binding server for commits (see initDirect).
	commit  *http.Client
	base    string // https://host:port of the binding server
	minSize int64  // < 0: never
	// proxyUntil (unix ns): until then files go through the server unasked.
	proxyUntil atomic.Int64
}

func (u *Uploader) initDirect(host string, api http.RoundTripper) {
	d := &u.direct
	d.base, d.minSize = "https://"+host, u.cfg.DirectMinSize
	if d.minSize == 0 {
		d.minSize = DefaultDirectMinSize
	}
	d.api = &http.Client{Transport: api, CheckRedirect: noRedirect}
	// Commits wait for the server's copy of the object: no transport-wide
	// answer timeout, a per-request one that grows with the size.
	var ct http.RoundTripper = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		DialTLSContext:      u.dialTLS,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if u.cfg.WrapTransport != nil {
		ct = u.cfg.WrapTransport(ct)
	}
	d.commit = &http.Client{Transport: &tokenTransport{file: u.cfg.TokenFile, podTokenFile: u.cfg.PodTokenFile, pod: &u.podUID, next: ct}, CheckRedirect: noRedirect}
	var tr http.RoundTripper = &http.Transport{
		// The store may be outside the cluster, behind a proxy.
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		DialTLSContext:        u.dialStoreTLS,
		ResponseHeaderTimeout: responseHeaderTimeout,
		ExpectContinueTimeout: 2 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
	}
	if u.cfg.WrapStoreTransport != nil {
		tr = u.cfg.WrapStoreTransport(tr)
	}
	d.store = &http.Client{Transport: tr, CheckRedirect: noRedirect}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func (d *direct) wants(size int64) bool {
	return d.minSize >= 0 && size >= d.minSize && time.Now().UnixNano() >= d.proxyUntil.Load()
}

func (d *direct) proxyFor(t time.Duration) { d.proxyUntil.Store(time.Now().Add(t).UnixNano()) }

// dialStoreTLS verifies the store with the system roots plus the CA file
// (a store with a private CA: put its CA in the bundle), read again for
// every new connection.
func (u *Uploader) dialStoreTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if f := u.ca.File(); f != "" {
		if _, pem, err := credentials.LoadCA(f); err == nil {
			pool.AppendCertsFromPEM(pem)
		}
	}
	return dialVerified(ctx, network, addr, pool)
}

// sent is what an upload verified: the body's MD5 and CRC-64/NVME, and how
// many of its bytes were found stored (read, not sent).
type sent struct {
	md5, crc string
	resumed  int64
}

// send sends size bytes of body to key, in direct mode if the server offers
// it, and returns their MD5 and CRC-64/NVME once the server verified them.
func (u *Uploader) send(ctx context.Context, key string, body io.Reader, size int64) (sent, error) {
	d := &u.direct
	if !d.wants(size) {
		sum, crc, err := u.put(ctx, key, body, size)
		return sent{md5: sum, crc: crc}, err
	}
	a, err := u.authorize(ctx, key, size)
	if err != nil {
		return sent{}, err
	}
	var res sent
	switch a.Mode {
	case upload.ModeDirect:
		res.md5, res.crc, err = u.putDirect(ctx, key, a, body, size)
	case upload.ModeDirectParts:
		res, err = u.putDirectParts(ctx, key, a, body, size)
	default:
		d.proxyFor(proxyRecheck)
		res.md5, res.crc, err = u.put(ctx, key, body, size)
		return res, err
	}
	var unreachable *storeUnreachableError
	if errors.As(err, &unreachable) {
		// The store cannot be reached from here: the next attempts go
		// through the server. (A binding server that cannot be reached,
		// for a commit, is no reason to: another replica answers the next
		// attempt.)
		d.proxyFor(proxyRecheck)
		u.log.Warn("the artifact store cannot be reached for direct uploads; uploading through the binding server",
			"error", err, "for", proxyRecheck.String())
	}
	return res, err
}

// postJSON posts v to the binding server's path and decodes the answer into
// out; a refusal is a minio.ErrorResponse (classified as a proxied PUT's).
func (u *Uploader) postJSON(ctx context.Context, c *http.Client, path string, v, out any) (status int, err error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.direct.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, s3Error(resp, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s: the server's answer is not JSON: %w", path, err)
	}
	return resp.StatusCode, nil
}

// s3Error turns an S3 XML error answer into a minio.ErrorResponse.
func s3Error(resp *http.Response, raw []byte) error {
	er := minio.ErrorResponse{}
	_ = xml.Unmarshal(raw, &er)
	er.StatusCode = resp.StatusCode
	if er.Code == "" {
		er.Code = http.StatusText(resp.StatusCode)
	}
	if er.Message == "" {
		er.Message = strings.TrimSpace(string(raw[:min(len(raw), 200)]))
	}
	return er
}

func (u *Uploader) authorize(ctx context.Context, key string, size int64) (upload.AuthorizeResponse, error) {
	var a upload.AuthorizeResponse
	_, restart := u.restartParts.LoadAndDelete(key)
	status, err := u.postJSON(ctx, u.direct.api, upload.PathAuthorize, upload.AuthorizeRequest{Key: key, Size: size, Restart: restart, Parts: true}, &a)
	switch {
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		// A server without direct uploads.
		return upload.AuthorizeResponse{Mode: upload.ModeProxy}, nil
	case err != nil:
		return a, fmt.Errorf("authorizing %s: %w", key, err)
	case a.Mode == upload.ModeDirect && (a.URL == "" || a.Upload == ""):
		return a, fmt.Errorf("authorizing %s: the server answered direct mode without a URL or upload id", key)
	case a.Mode == upload.ModeDirectParts && a.Upload == "":
		return a, fmt.Errorf("authorizing %s: the server answered an upload in parts without its id", key)
	}
	return a, nil
}

// putDirect PUTs the body to the presigned URL, computing its MD5 and
// CRC-64/NVME as it streams; the store's ETag must equal the MD5 (unless the
// server said its ETags are not MD5s) and a checksum it reports the CRC,
// and then the server must confirm the stored upload (commit), which checks
// the store's own checksum against the claimed one. Only then is the file
// verified.
//
// The checksum is not sent with the PUT: it is known only once the file
// was read (the file is read once), and a presigned URL carries no
// aws-chunked trailer on every store. The store computes its own (AWS and
// versitygw do for every PUT): the commit compares it with the claim.
func (u *Uploader) putDirect(ctx context.Context, key string, a upload.AuthorizeResponse, body io.Reader, size int64) (string, string, error) {
	h, c := md5.New(), upload.NewCRC64NVME()
	hd := http.Header{}
	for k, v := range a.Headers {
		hd.Set(k, v)
	}
	hd.Set("Content-Type", "application/octet-stream")
	if size >= expectContinueMin {
		hd.Set("Expect", "100-continue")
	}
	resp, err := u.storePut(ctx, "direct PUT "+key, a.URL, hd, io.TeeReader(io.LimitReader(body, size), io.MultiWriter(h, c)), size)
	if err != nil {
		return "", "", err
	}
	sum, crc := hex.EncodeToString(h.Sum(nil)), upload.EncodeChecksum(c.Sum(nil))
	if a.Verify != upload.VerifyCRC64NVME {
		if err := checkSum(key, sum, resp.Get("ETag")); err != nil {
			return "", "", err
		}
	}
	if err := checkCRC(key, crc, resp.Get(upload.ChecksumHeader)); err != nil {
		return "", "", err
	}
	var cr upload.CommitResponse
	cctx, ccancel := context.WithTimeout(ctx, upload.CommitTimeout(responseHeaderTimeout, size))
	defer ccancel()
	if _, err := u.postJSON(cctx, u.direct.commit, upload.PathCommit, upload.CommitRequest{Key: key, Size: size, MD5: sum, CRC64NVME: crc, Upload: a.Upload}, &cr); err != nil {
		return "", "", fmt.Errorf("committing %s: %w", key, err)
	}
	if !strings.EqualFold(cr.ETag, sum) || cr.Size != size || cr.CRC64NVME != "" && cr.CRC64NVME != crc {
		return "", "", fmt.Errorf("committing %s: %w: the server verified ETag %q, CRC-64/NVME %q and %d bytes; the bytes sent have MD5 %s, CRC-64/NVME %s (%d bytes)",
			key, errETagMismatch, cr.ETag, cr.CRC64NVME, cr.Size, sum, crc, size)
	}
	return sum, crc, nil
}

// storeError is the artifact store's refusal of a presigned PUT (expired,
// signature, the store's own limits): the next attempt authorizes again.
type storeError struct{ err minio.ErrorResponse }

func (e *storeError) Error() string {
	return fmt.Sprintf("the artifact store answered %d %s: %s", e.err.StatusCode, e.err.Code, e.err.Message)
}

// redact drops the query (the presigned URL's signature) from a *url.Error.
func redact(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	c := *ue
	if p, perr := url.Parse(ue.URL); perr == nil {
		p.RawQuery = ""
		c.URL = p.String()
	} else {
		c.URL = "<presigned URL>"
	}
	return &c
}

// storeUnreachableError is a request to the artifact store that could not
// connect: direct uploads are then left for a while (proxyFor).
type storeUnreachableError struct{ err error }

func (e *storeUnreachableError) Error() string { return e.err.Error() }
func (e *storeUnreachableError) Unwrap() error { return e.err }

// storeRequestError is the error of a request to the store, its URL's
// signature dropped, marked unreachable if it could not connect.
func storeRequestError(err error) error {
	err = redact(err)
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return &storeUnreachableError{err}
	}
	return err
}

// storePut PUTs size bytes of src to a presigned URL of the artifact store
// with the headers hd, watching for a stall, and returns the answer's
// headers once the store took every byte; what names the request in errors.
func (u *Uploader) storePut(ctx context.Context, what, url string, hd http.Header, src io.Reader, size int64) (http.Header, error) {
	pr, actx, stop := u.stallWatched(ctx, src)
	defer stop()
	req, err := http.NewRequestWithContext(actx, http.MethodPut, url, io.NopCloser(pr))
	if err != nil {
		return nil, fmt.Errorf("%s: the server's URL: %w", what, redact(err))
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	for k := range hd {
		req.Header.Set(k, hd.Get(k))
	}
	resp, err := u.direct.store.Do(req)
	if err != nil {
		if stalled(ctx, actx) {
			return nil, fmt.Errorf("%s: %w for %s", what, errStalled, u.cfg.StallTimeout)
		}
		return nil, fmt.Errorf("%s: %w", what, storeRequestError(err))
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %w", what, &storeError{err: s3Error(resp, raw).(minio.ErrorResponse)})
	}
	if n := pr.n.Load(); n != size {
		return nil, fmt.Errorf("%s: %w (sent %d of %d bytes)", what, errChanged, n, size)
	}
	return resp.Header, nil
}
