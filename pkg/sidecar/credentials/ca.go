package credentials

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ErrNoCertificate is wrapped when a CA file holds no PEM certificate.
var ErrNoCertificate = errors.New("holds no PEM certificate")

// LoadCA reads a PEM CA bundle and returns its pool and the bytes read.
func LoadCA(file string) (*x509.CertPool, []byte, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%s %w", file, ErrNoCertificate)
	}
	return pool, pem, nil
}

// CA is a CA bundle file read again on every use and parsed again only when
// its content changed, so a rotated CA is picked up by the next connection.
// It is safe for concurrent use.
type CA struct {
	file string

	mu   sync.Mutex
	pem  []byte
	pool *x509.CertPool
}

// NewCA returns the CA of file; an empty file means the system roots.
func NewCA(file string) *CA { return &CA{file: file} }

// File is the CA bundle's path ("" for the system roots).
func (c *CA) File() string { return c.file }

// Pool returns the bundle as it is now: nil for the system roots. changed
// reports that the bundle replaced a different one read earlier. Errors are
// prefixed "read CA: ".
func (c *CA) Pool() (pool *x509.CertPool, changed bool, err error) {
	if c.file == "" {
		return nil, false, nil
	}
	pem, err := os.ReadFile(c.file)
	if err != nil {
		return nil, false, fmt.Errorf("read CA: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pool != nil && bytes.Equal(pem, c.pem) {
		return c.pool, false, nil
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, false, fmt.Errorf("read CA: %s %w", c.file, ErrNoCertificate)
	}
	changed = c.pool != nil
	c.pem, c.pool = pem, p
	return p, changed, nil
}
