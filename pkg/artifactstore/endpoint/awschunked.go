package endpoint

import (
	"bufio"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/tether-dev/tether/pkg/upload"
)

// A sidecar streaming a file it reads once knows its checksum only at the
// end: it sends the body aws-chunked with the checksum in a trailer
// (x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER, what minio-go
// and the AWS SDKs send for an unsigned payload with a trailing checksum).
// Signed chunks (STREAMING-AWS4-HMAC-SHA256-*) are not taken: requests to
// this endpoint are not SigV4-signed.

const unsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"

// maxTrailer bounds the trailer section of an aws-chunked body.
const maxTrailer = 4 << 10

// chunkedShape reports whether hd is an unsigned aws-chunked PUT with a
// trailer, and its decoded size; a malformed or unsupported one is an error.
func chunkedShape(hd http.Header) (ok bool, size int64, trailers []string, e *apiError) {
	enc := strings.ToLower(hd.Get("Content-Encoding"))
	sha := hd.Get("X-Amz-Content-Sha256")
	if !strings.Contains(enc, "aws-chunked") && !strings.HasPrefix(sha, "STREAMING-") && hd.Get("X-Amz-Decoded-Content-Length") == "" && hd.Get("X-Amz-Trailer") == "" {
		return false, 0, nil, nil
	}
	if sha != unsignedTrailer || !strings.Contains(enc, "aws-chunked") {
		return false, 0, nil, &apiError{http.StatusNotImplemented, "NotImplemented",
			"of aws-chunked bodies only unsigned ones with a trailing checksum (x-amz-content-sha256: " + unsignedTrailer + ") are supported: send that, or the plain body with Content-Length"}
	}
	n, err := strconv.ParseInt(hd.Get("X-Amz-Decoded-Content-Length"), 10, 64)
	if err != nil || n < 0 {
		return false, 0, nil, &apiError{http.StatusBadRequest, "InvalidArgument",
			"an aws-chunked body needs x-amz-decoded-content-length, the object's size"}
	}
	for _, v := range hd.Values("X-Amz-Trailer") {
		for t := range strings.SplitSeq(v, ",") {
			if t = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(t)); t != "" {
				trailers = append(trailers, t)
			}
		}
	}
	for _, t := range trailers {
		if _, ok := trailerHash(t); !ok {
			return false, 0, nil, &apiError{http.StatusBadRequest, "InvalidRequest",
				strings.ToLower(t) + " is not a supported trailing checksum: send x-amz-checksum-crc64nvme, -crc32, -crc32c, -sha1 or -sha256"}
		}
	}
	return true, n, trailers, nil
}

// chunkedReader decodes an unsigned aws-chunked body: chunks of
// "<hex size>\r\n<data>\r\n", a zero chunk "0\r\n", then trailer lines
// "name:value" and an empty line. Read returns the data; Trailer, called
// once the data was read, the trailer.
type chunkedReader struct {
	r     *bufio.Reader
	left  int64 // of the current chunk
	done  bool  // the zero chunk was read
	err   error
	first bool
}

func newChunkedReader(r io.Reader) *chunkedReader {
	return &chunkedReader{r: bufio.NewReaderSize(r, 64<<10), first: true}
}

var errChunked = errors.New("malformed aws-chunked body")

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		if !c.first {
			if err := c.crlf(); err != nil {
				return 0, c.fail(err)
			}
		}
		c.first = false
		line, err := c.line()
		if err != nil {
			return 0, c.fail(err)
		}
		if strings.Contains(line, ";") {
			return 0, c.fail(fmt.Errorf("%w: signed chunks are not supported", errChunked))
		}
		n, err := strconv.ParseInt(line, 16, 64)
		if err != nil || n < 0 {
			return 0, c.fail(fmt.Errorf("%w: chunk size %q", errChunked, line))
		}
		if n == 0 {
			c.done = true
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

func (c *chunkedReader) fail(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	c.err = err
	return err
}

func (c *chunkedReader) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return err
	}
	if string(b[:]) != "\r\n" {
		return fmt.Errorf("%w: a chunk does not end with CRLF", errChunked)
	}
	return nil
}

// line reads one line (at most 256 bytes) without its line end.
func (c *chunkedReader) line() (string, error) {
	var sb strings.Builder
	for sb.Len() <= 256 {
		b, err := c.r.ReadByte()
		if err != nil {
			return "", err
		}
		if b == '\n' {
			return strings.TrimSuffix(sb.String(), "\r"), nil
		}
		sb.WriteByte(b)
	}
	return "", fmt.Errorf("%w: line too long", errChunked)
}

// Trailer reads the rest of the body (after the data) and returns its
// trailer headers, canonical names.
func (c *chunkedReader) Trailer() (http.Header, error) {
	if !c.done {
		// The data's reader stopped at its size: the zero chunk follows.
		if _, err := c.Read(nil); err != io.EOF {
			if err == nil {
				err = fmt.Errorf("%w: more data than x-amz-decoded-content-length", errChunked)
			}
			return nil, err
		}
	}
	h := http.Header{}
	total := 0
	for {
		line, err := c.line()
		if err != nil {
			if errors.Is(err, io.EOF) && total > 0 {
				return h, nil
			}
			return nil, c.fail(err)
		}
		total += len(line) + 1
		if total > maxTrailer {
			return nil, fmt.Errorf("%w: trailer over %d bytes", errChunked, maxTrailer)
		}
		if strings.TrimSpace(line) == "" {
			// The end; whatever follows (a second CRLF) is dropped.
			_, _ = io.Copy(io.Discard, io.LimitReader(c.r, maxTrailer))
			return h, nil
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%w: trailer line %q", errChunked, line)
		}
		h.Add(textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name)), strings.TrimSpace(value))
	}
}

// trailerHash is the hash of a checksum header (request or trailer).
func trailerHash(name string) (func() hash.Hash, bool) {
	if name == upload.ChecksumHeader {
		return func() hash.Hash { return upload.NewCRC64NVME() }, true
	}
	f, ok := checksumAlgorithms[name]
	return f, ok
}
