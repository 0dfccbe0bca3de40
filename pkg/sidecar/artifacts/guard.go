package artifacts

import "io"

// lastBytesGuard reads exactly remaining bytes of r, and runs check before
// the read that would deliver the last of them: if check fails, those bytes
// are withheld and the read fails, so the request's body ends short and the
// server stores nothing. It is how a file that changed while it was read
// never becomes an object.
type lastBytesGuard struct {
	r         io.Reader
	remaining int64
	check     func() error
	err       error
}

func (g *lastBytesGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.remaining <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.remaining {
		p = p[:g.remaining]
	}
	n, err := g.r.Read(p)
	g.remaining -= int64(n)
	if g.remaining == 0 {
		if cerr := g.check(); cerr != nil {
			g.err = cerr
			return 0, cerr
		}
		return n, io.EOF
	}
	if err == io.EOF {
		// Shorter than it was when opened: changed.
		g.err = errChanged
		return n, g.err
	}
	return n, err
}
