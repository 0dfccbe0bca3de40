package endpoint

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"strings"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// checksum is one digest the client claimed for the body, besides
// Content-MD5: an x-amz-checksum-* header or a hex x-amz-content-sha256.
type checksum struct {
	header string
	want   []byte
	h      hash.Hash
	// code is the S3 error code of a mismatch.
	code string
	// trailer: the value comes in the aws-chunked trailer (want is set
	// once it was read, fromTrailer).
	trailer bool
}

// digests is what the body is hashed into while it streams.
type digests struct {
	md5 hash.Hash
	// md5Sum, if set, is the body's MD5 as a backend that hashed the body
	// itself computed it (useSum): md5 then saw nothing.
	md5Sum []byte
	// contentMD5 is the decoded Content-MD5, nil if the client sent none.
	contentMD5 []byte
	checks     []checksum
	// crc is the body's CRC-64/NVME, always computed (about 1/100 of the
	// MD5's cost): what the store's own checksum must equal. crcWant is
	// the client's claim (header or trailer), nil if none; crcTrailer: it
	// comes in the trailer.
	crc        hash.Hash64
	crcWant    []byte
	crcTrailer bool
}

// crcSum is the body's CRC-64/NVME in S3's form.
func (d *digests) crcSum() string { return upload.EncodeChecksum(d.crc.Sum(nil)) }

// claimedCRC is the CRC-64/NVME the client claimed before the body ("" if
// none, or if it comes in the trailer).
func (d *digests) claimedCRC() string {
	if d.crcWant == nil || d.crcTrailer {
		return ""
	}
	return upload.EncodeChecksum(d.crcWant)
}

// fromTrailer takes the trailing checksums the request announced from its
// trailer t.
func (d *digests) fromTrailer(t http.Header) *apiError {
	missing := func(name string) *apiError {
		return &apiError{http.StatusBadRequest, "InvalidRequest",
			"the trailer announced " + strings.ToLower(name) + " (x-amz-trailer) but did not send it as the base64 encoding of a checksum of its algorithm"}
	}
	if d.crcTrailer {
		b, err := base64.StdEncoding.DecodeString(t.Get(upload.ChecksumHeader))
		if err != nil || len(b) != d.crc.Size() {
			return missing(upload.ChecksumHeader)
		}
		d.crcWant = b
	}
	for i, c := range d.checks {
		if !c.trailer {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(t.Get(c.header))
		if err != nil || len(b) != c.h.Size() {
			return missing(c.header)
		}
		d.checks[i].want = b
	}
	return nil
}

// writer is what the body streams into: the MD5 unless withMD5 is false
// (the backend hashes it), and the claimed checksums; nil if nothing.
func (d *digests) writer(withMD5 bool) io.Writer {
	var ws []io.Writer
	if withMD5 {
		ws = append(ws, d.md5)
	}
	ws = append(ws, d.crc)
	for _, c := range d.checks {
		ws = append(ws, c.h)
	}
	switch len(ws) {
	case 0:
		return nil
	case 1:
		return ws[0]
	}
	return io.MultiWriter(ws...)
}

// useSum takes etag (lowercase hex) as the body's MD5.
func (d *digests) useSum(etag string) bool {
	b, err := hex.DecodeString(etag)
	if err != nil || len(b) != md5.Size {
		return false
	}
	d.md5Sum = b
	return true
}

func (d *digests) sum() []byte {
	if d.md5Sum != nil {
		return d.md5Sum
	}
	return d.md5.Sum(nil)
}

// verify compares the streamed body's digests with the claimed ones.
func (d *digests) verify() *apiError {
	sum := d.sum()
	if d.contentMD5 != nil && !bytes.Equal(sum, d.contentMD5) {
		return &apiError{http.StatusBadRequest, "BadDigest",
			"the Content-MD5 you sent (" + base64.StdEncoding.EncodeToString(d.contentMD5) + ") does not match the MD5 of the body received (" +
				base64.StdEncoding.EncodeToString(sum) + "); nothing was kept: the file changed while it was read or was corrupted in transit, upload it again"}
	}
	if d.crcWant != nil && !bytes.Equal(d.crc.Sum(nil), d.crcWant) {
		return &apiError{http.StatusBadRequest, "BadDigest",
			"the x-amz-checksum-crc64nvme you sent does not match the body received; nothing was kept: the file changed while it was read or was corrupted in transit, upload it again"}
	}
	for _, c := range d.checks {
		if got := c.h.Sum(nil); !bytes.Equal(got, c.want) {
			return &apiError{http.StatusBadRequest, c.code,
				"the " + c.header + " you sent does not match the body received; nothing was kept: upload the file again"}
		}
	}
	return nil
}

// checksumAlgorithms are the x-amz-checksum-* headers the endpoint verifies.
var checksumAlgorithms = map[string]func() hash.Hash{
	"X-Amz-Checksum-Crc32":  func() hash.Hash { return crc32.NewIEEE() },
	"X-Amz-Checksum-Crc32c": func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
	"X-Amz-Checksum-Sha1":   sha1.New,
	"X-Amz-Checksum-Sha256": sha256.New,
}

// checksumParameters are x-amz-checksum-* headers that describe rather than
// claim a checksum; they are ignored.
var checksumParameters = map[string]bool{
	"X-Amz-Checksum-Type":      true,
	"X-Amz-Checksum-Algorithm": true,
	"X-Amz-Checksum-Mode":      true,
}

// parseDigests reads the digests a PUT claims for its body, in headers and
// (announced, their values read after the body) in its trailer.
func parseDigests(h http.Header, trailers []string) (*digests, *apiError) {
	d := &digests{md5: md5.New(), crc: upload.NewCRC64NVME()}
	for _, t := range trailers {
		if h.Get(t) != "" {
			return nil, &apiError{http.StatusBadRequest, "InvalidRequest", strings.ToLower(t) + " is sent both as a header and in the trailer: send it once"}
		}
		if t == upload.ChecksumHeader {
			d.crcTrailer = true
			d.crcWant = []byte{} // not nil: claimed
			continue
		}
		newHash, _ := trailerHash(t)
		d.checks = append(d.checks, checksum{header: strings.ToLower(t), h: newHash(), code: "BadDigest", trailer: true})
	}
	if vs := h.Values("Content-MD5"); len(vs) > 0 {
		b, err := base64.StdEncoding.DecodeString(vs[0])
		if len(vs) > 1 || err != nil || len(b) != md5.Size {
			return nil, &apiError{http.StatusBadRequest, "InvalidDigest",
				"Content-MD5 must be the base64 encoding of the body's 16-byte MD5 (24 characters), sent once; send it correctly or leave it out"}
		}
		d.contentMD5 = b
	}
	for name, vs := range h {
		if !strings.HasPrefix(name, "X-Amz-Checksum-") || checksumParameters[name] {
			continue
		}
		if name == upload.ChecksumHeader {
			b, err := base64.StdEncoding.DecodeString(vs[0])
			if len(vs) > 1 || err != nil || len(b) != d.crc.Size() {
				return nil, &apiError{http.StatusBadRequest, "InvalidRequest",
					"the value of " + strings.ToLower(name) + " is not the base64 encoding of a checksum of its algorithm"}
			}
			d.crcWant = b
			continue
		}
		newHash, ok := checksumAlgorithms[name]
		if !ok {
			return nil, &apiError{http.StatusBadRequest, "InvalidRequest",
				strings.ToLower(name) + " is not supported: send Content-MD5, or x-amz-checksum-crc64nvme, -crc32, -crc32c, -sha1 or -sha256"}
		}
		hh := newHash()
		b, err := base64.StdEncoding.DecodeString(vs[0])
		if len(vs) > 1 || err != nil || len(b) != hh.Size() {
			return nil, &apiError{http.StatusBadRequest, "InvalidRequest",
				"the value of " + strings.ToLower(name) + " is not the base64 encoding of a checksum of its algorithm"}
		}
		d.checks = append(d.checks, checksum{header: strings.ToLower(name), want: b, h: hh, code: "BadDigest"})
	}
	switch v := h.Get("X-Amz-Content-Sha256"); {
	case v == "" || v == "UNSIGNED-PAYLOAD" || v == unsignedTrailer && len(trailers) > 0:
	case len(v) == 64 && isHex(v):
		b, _ := hex.DecodeString(v)
		d.checks = append(d.checks, checksum{header: "x-amz-content-sha256", want: b, h: sha256.New(), code: "XAmzContentSHA256Mismatch"})
	default:
		return nil, &apiError{http.StatusBadRequest, "InvalidArgument",
			"x-amz-content-sha256 must be UNSIGNED-PAYLOAD or the body's hex SHA-256"}
	}
	return d, nil
}

func isHex(s string) bool {
	return objects.IsLowerHex(strings.ToLower(s))
}
