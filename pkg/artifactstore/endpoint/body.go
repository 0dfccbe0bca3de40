package endpoint

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// errShortBody is a body that ended before Content-Length bytes.
var errShortBody = errors.New("unexpected end of body")

// errRefused is a body withheld from the backend: the job's artifacts
// became final while it streamed.
var errRefused = errors.New("the job's artifacts became final during the upload")

// bodyReader reads exactly remaining bytes of a request body into w (the
// digests, if any), and extends the connection's deadlines while the body makes
// progress.
type bodyReader struct {
	r         io.Reader
	remaining int64
	n         int64
	// err is the body's first error other than a clean end.
	err error
	w   io.Writer
	rc  *http.ResponseController
	// last, if set, is asked before the body's last bytes are handed on
	// (so before any backend can complete the object); refused is its
	// refusal, after which the body fails.
	last    func() *apiError
	refused *apiError
	checked bool
	// idle is how long a read may make no progress.
	idle     time.Duration
	extended time.Time
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	// Fill p (one TLS record is at most 16 KiB): the backend then writes
	// in the chunks it asked for, not a record at a time. Every read that
	// brings bytes counts as progress.
	var n int
	var err error
	for n < len(p) && err == nil {
		var m int
		m, err = b.r.Read(p[n:])
		n += m
		// Extending costs a timer update: do it at most every idle/4.
		if now := time.Now(); m > 0 && now.Sub(b.extended) > min(b.idle/4, time.Second) {
			b.extend(now)
		}
	}
	if n > 0 && int64(n) == b.remaining && b.last != nil {
		b.checked = true
		if e := b.last(); e != nil {
			b.refused, b.err = e, errRefused
			return 0, b.err
		}
	}
	if n > 0 {
		if b.w != nil {
			_, _ = b.w.Write(p[:n])
		}
		b.n += int64(n)
		b.remaining -= int64(n)
	}
	switch {
	case err == io.EOF && b.remaining > 0:
		b.err = errShortBody
		return n, b.err
	case err != nil && err != io.EOF:
		b.err = err
	}
	return n, err
}

// extend moves the connection's deadlines to now+idle. It fails silently for
// ResponseWriters without deadline support.
func (b *bodyReader) extend(now time.Time) {
	b.extended = now
	_ = b.rc.SetReadDeadline(now.Add(b.idle))
	_ = b.rc.SetWriteDeadline(now.Add(b.idle))
}
