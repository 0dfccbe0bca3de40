package artifacts

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/upload"
)

// Resuming a large upload (docs/artifacts.md, "Files in parts"): the binding
// server stores a large body in parts and keeps the parts a PUT stored
// before it ended early. Before a large file is sent through the server,
// the Uploader asks where its upload may resume; if the bytes the stored
// parts hold are still the file's (the CRC-64/NVME of the file's first
// bytes equals theirs), only the rest is sent. The file's MD5 and checksum
// are still of all of it: its first bytes are read (not sent) to compute
// them, and the server's answer is checked against them as for any PUT.

// DefaultResumeMinSize is the smallest file whose upload may resume: the
// binding server's default threshold for storing a body in parts.
const DefaultResumeMinSize = upload.DefaultMultipartThreshold

func (u *Uploader) resumeMinSize() int64 {
	if u.cfg.ResumeMinSize != 0 {
		return u.cfg.ResumeMinSize
	}
	return DefaultResumeMinSize
}

// resumePoint asks where the upload of size bytes to key may resume; 0 if
// nowhere (or the server cannot say: an older server, which stores no
// parts).
func (u *Uploader) resumePoint(ctx context.Context, key string, size int64) (upload.ResumeResponse, error) {
	var r upload.ResumeResponse
	// Only a body sent through the server is stored in parts by it: a
	// direct upload (at most a single PUT) never resumes.
	throughServer := size > upload.MaxSinglePutSize || !u.direct.wants(size)
	if u.noResume.Load() || u.cfg.ResumeMinSize < 0 || size < u.resumeMinSize() || !throughServer {
		return r, nil
	}
	status, err := u.postJSON(ctx, u.direct.api, upload.PathResume, upload.ResumeRequest{Key: key, Size: size}, &r)
	switch {
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		u.noResume.Store(true)
		return upload.ResumeResponse{}, nil
	case err != nil:
		return r, fmt.Errorf("asking where %s resumes: %w", key, err)
	case r.Offset < 0 || r.Offset > size:
		return upload.ResumeResponse{}, fmt.Errorf("asking where %s resumes: the server answered offset %d for a file of %d bytes", key, r.Offset, size)
	}
	return r, nil
}

// resumed is a file's prefix that need not be sent again: its length, its
// CRC-64/NVME and the hashes of the whole file so far.
type resumed struct {
	offset int64
	crc    string
	md5    hash.Hash
	crc64  hash.Hash64
}

// readPrefix reads the file's first r.Offset bytes (f at its start) and
// returns them as resumed if their checksum is r's; nil (f back at its
// start) if the file's first bytes are no longer what the parts hold.
func readPrefix(f *os.File, st fs.FileInfo, r upload.ResumeResponse) (*resumed, error) {
	if r.Offset <= 0 || r.CRC64NVME == "" {
		return nil, nil
	}
	h, c := md5.New(), upload.NewCRC64NVME()
	n, err := io.Copy(io.MultiWriter(h, c), io.LimitReader(f, r.Offset))
	if err != nil {
		return nil, &localError{err}
	}
	if n != r.Offset {
		return nil, fmt.Errorf("%w (read %d of %d bytes)", errChanged, n, r.Offset)
	}
	if err := unchanged(f, st); err != nil {
		return nil, err
	}
	if upload.EncodeChecksum(c.Sum(nil)) != r.CRC64NVME {
		// Rewritten since its parts were stored: sent whole, which drops
		// the old parts (never a mix of two versions).
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, &localError{err}
		}
		return nil, nil
	}
	return &resumed{offset: r.Offset, crc: r.CRC64NVME, md5: h, crc64: c}, nil
}

// resumeKey carries a resumed PUT's headers to the transport (minio-go
// sends no custom request headers of its own).
type resumeKey struct{}

func withResume(ctx context.Context, r *resumed) context.Context {
	return context.WithValue(ctx, resumeKey{}, r)
}

// setResumeHeaders adds a resumed PUT's headers to req.
func setResumeHeaders(req *http.Request) {
	if r, ok := req.Context().Value(resumeKey{}).(*resumed); ok && req.Method == http.MethodPut {
		req.Header.Set(names.HeaderResumeOffset, strconv.FormatInt(r.offset, 10))
		req.Header.Set(names.HeaderResumeCRC64NVME, r.crc)
	}
}

// putResumed sends the file's bytes after r.offset (body, size-r.offset of
// them) as a resumed PUT and returns the whole file's MD5 and CRC-64/NVME
// once the server's answer matches them.
func (u *Uploader) putResumed(ctx context.Context, key string, body io.Reader, size int64, r *resumed) (string, string, error) {
	rest := size - r.offset
	src := io.TeeReader(io.LimitReader(body, rest), io.MultiWriter(r.md5, r.crc64))
	sum, crc, err := u.putHashed(withResume(ctx, r), key, src, rest, func() (string, string) {
		return hex.EncodeToString(r.md5.Sum(nil)), upload.EncodeChecksum(r.crc64.Sum(nil))
	})
	if err != nil {
		return "", "", err
	}
	return sum, crc, nil
}

// errNoChecksum is an answer for an object stored in parts without the
// checksum that is its only verification.
var errNoChecksum = errors.New("the server answered a multipart ETag without the object's CRC-64/NVME")
