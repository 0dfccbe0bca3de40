package s3server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"
)

// Fault is how a Front misbehaves: the ways real stores differ from "the
// ETag of a single PUT is its MD5", and a store that lies. Faults combine
// (FaultRandomETag|FaultNoChecksums: SSE-KMS on a store without flexible
// checksums).
type Fault int32

// FaultNone passes everything through.
const FaultNone Fault = 0

const (
	// FaultRandomETag rewrites every ETag (headers and XML answers) to a
	// hex string that is not the MD5, stable per object version, as AWS
	// answers for objects under SSE-KMS or SSE-C.
	FaultRandomETag Fault = 1 << iota
	// FaultWrongETag answers another MD5-shaped ETag than the object's
	// (one hex digit changed): a store that lies about the body it holds.
	FaultWrongETag
	// FaultWrongChecksum changes every x-amz-checksum-crc64nvme in answers
	// (one bit): a store that lies about its checksum.
	FaultWrongChecksum
	// FaultNoChecksums drops x-amz-checksum-* headers from answers: a
	// store that keeps no flexible checksum (the requests' headers are
	// signed, so they go through: such a store ignores them).
	FaultNoChecksums
)

// String names the fault as the tests' subtests do ("random-etag+no-checksums").
func (f Fault) String() string {
	if f == FaultNone {
		return "none"
	}
	var names []string
	for _, x := range []struct {
		f    Fault
		name string
	}{{FaultRandomETag, "random-etag"}, {FaultWrongETag, "wrong-etag"}, {FaultWrongChecksum, "wrong-checksum"}, {FaultNoChecksums, "no-checksums"}} {
		if f&x.f != 0 {
			names, f = append(names, x.name), f&^x.f
		}
	}
	if f != 0 {
		names = append(names, "Fault("+strconv.Itoa(int(f))+")")
	}
	return strings.Join(names, "+")
}

// Front is an S3 front end for tests: a reverse proxy on a loopback port in
// front of a Server that passes every request on (the Host header kept, so
// SigV4 signatures and presigned URLs made for the Front's endpoint stay
// valid) and rewrites the answers as its Fault says. The fault can change
// while the Front runs (SetFault): a store may start lying after Tether's
// start-up probe trusted it.
type Front struct {
	// Endpoint is host:port of the Front on 127.0.0.1 (plain HTTP).
	Endpoint string

	fault atomic.Int32
	// only, if set, limits the fault to object keys containing it.
	only atomic.Pointer[string]
	// real maps each ETag the Front made up to the store's, so a condition
	// naming it (If-Match, x-amz-copy-source-if-match) means what it
	// means on a store that answers such ETags itself; creds re-sign a
	// request whose conditions were translated.
	real  sync.Map
	creds atomic.Pointer[[2]string]
	srv   *http.Server
	ln    net.Listener
}

// NewFront starts a Front for the S3 server at target (host:port, plain
// HTTP) with fault.
func NewFront(target string, fault Fault) (*Front, error) {
	return NewFrontTo(&url.URL{Scheme: "http", Host: target}, nil, fault)
}

// NewFrontTo starts a plain-HTTP Front for the S3 server at u (http or
// https), reached through transport (nil: http.DefaultTransport).
func NewFrontTo(u *url.URL, transport http.RoundTripper, fault Fault) (*Front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Front{Endpoint: ln.Addr().String(), ln: ln}
	f.fault.Store(int32(fault))
	rp := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host // what the signature covers
			f.translate(pr.Out)
		},
		ModifyResponse: func(resp *http.Response) error { return f.rewrite(resp) },
		// A lost store is a 502, as from a real gateway.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
		FlushInterval: -1,
	}
	f.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// Resign gives the Front the credentials to sign again a request whose
// ETag conditions it translated back to the store's ETags (a signature
// covers those headers). Without them conditions pass unchanged.
func (f *Front) Resign(access, secret string) { f.creds.Store(&[2]string{access, secret}) }

// translate rewrites ETag conditions naming made-up ETags to the store's.
func (f *Front) translate(r *http.Request) {
	c := f.creds.Load()
	if c == nil || r.Header.Get("Authorization") == "" {
		return
	}
	changed := false
	for _, h := range []string{"If-Match", "If-None-Match", "X-Amz-Copy-Source-If-Match", "X-Amz-Copy-Source-If-None-Match"} {
		v := r.Header.Get(h)
		if store, ok := f.real.Load(strings.ToLower(strings.Trim(v, `"`))); ok && v != "" {
			r.Header.Set(h, `"`+store.(string)+`"`)
			changed = true
		}
	}
	if changed {
		r.Header.Del("Authorization")
		*r = *signer.SignV4(*r, c[0], c[1], "", "us-east-1")
	}
}

// ParseFault reads a Fault as String writes it ("" is FaultNone).
func ParseFault(s string) (Fault, error) {
	if s == "" || s == "none" {
		return FaultNone, nil
	}
	var f Fault
	for name := range strings.SplitSeq(s, "+") {
		found := false
		for x := FaultRandomETag; x <= FaultNoChecksums; x <<= 1 {
			if x.String() == name {
				f, found = f|x, true
			}
		}
		if !found {
			return 0, errors.New("unknown S3 front fault " + strconv.Quote(name) + " (known: random-etag, wrong-etag, wrong-checksum, no-checksums, joined by +)")
		}
	}
	return f, nil
}

// SetFault changes the fault from the next answer on.
func (f *Front) SetFault(fault Fault) { f.fault.Store(int32(fault)) }

// Fault is the current fault.
func (f *Front) Fault() Fault { return Fault(f.fault.Load()) }

// Only limits the fault to requests whose object key contains s ("" for
// every request).
func (f *Front) Only(s string) {
	if s == "" {
		f.only.Store(nil)
		return
	}
	f.only.Store(&s)
}

// Close stops the Front.
func (f *Front) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := f.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return f.srv.Close()
	}
	return err
}

func (f *Front) applies(r *http.Request) bool {
	only := f.only.Load()
	return only == nil || strings.Contains(r.URL.Path, *only) || strings.Contains(r.Header.Get("X-Amz-Copy-Source"), *only)
}

var xmlETag = regexp.MustCompile(`<ETag>(&#34;|&quot;|")?([0-9a-fA-F]{32})(-[0-9]+)?(&#34;|&quot;|")?</ETag>`)

func (f *Front) rewrite(resp *http.Response) error {
	fault := f.Fault()
	if fault == FaultNone || !f.applies(resp.Request) {
		return nil
	}
	h := resp.Header
	if fault&FaultWrongChecksum != 0 {
		for k, vs := range h {
			if strings.HasPrefix(k, "X-Amz-Checksum-") && k != "X-Amz-Checksum-Type" && len(vs) > 0 {
				h.Set(k, flipChecksum(vs[0]))
			}
		}
	}
	if fault&FaultNoChecksums != 0 {
		for k := range h {
			if strings.HasPrefix(k, "X-Amz-Checksum-") {
				h.Del(k)
			}
		}
	}
	etagFault := fault & (FaultRandomETag | FaultWrongETag)
	if etagFault == 0 {
		return nil
	}
	if e := h.Get("ETag"); e != "" {
		h.Set("ETag", `"`+f.badETag(etagFault, strings.Trim(e, `"`))+`"`)
	}
	if !strings.Contains(h.Get("Content-Type"), "xml") || resp.ContentLength > 1<<20 {
		return nil
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	raw = xmlETag.ReplaceAllFunc(raw, func(m []byte) []byte {
		sub := xmlETag.FindSubmatch(m)
		return []byte("<ETag>" + string(sub[1]) + f.badETag(etagFault, string(sub[2])) + string(sub[4]) + "</ETag>")
	})
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.ContentLength = int64(len(raw))
	h.Set("Content-Length", strconv.Itoa(len(raw)))
	return nil
}

// badETag is the ETag a faulty store answers for one whose real ETag is e.
func (f *Front) badETag(fault Fault, e string) string {
	b := badETag(fault, e)
	f.real.Store(b, strings.ToLower(e))
	return b
}

func badETag(fault Fault, e string) string {
	if fault&FaultRandomETag != 0 {
		// Stable per object version, looks like an MD5, is not one.
		s := sha256.Sum256([]byte("sse-kms\x00" + strings.ToLower(e)))
		return hex.EncodeToString(s[:16])
	}
	b := []byte(strings.ToLower(e))
	if len(b) > 0 {
		if b[0] == '0' {
			b[0] = '1'
		} else {
			b[0] = '0'
		}
	}
	return string(b)
}

func flipChecksum(v string) string {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(b) == 0 {
		return "AAAAAAAAAAA="
	}
	b[len(b)-1] ^= 1
	return base64.StdEncoding.EncodeToString(b)
}
