package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/tether-dev/tether/pkg/upload"
)

// A manifest PUT holds the manifest's bytes until they are stored, but
// need not hold its entries: Scan checks them as the body streams in and
// keeps only a digest of each path (for duplicates), and once the manifest
// is stored ScannedManifest decodes them again from those bytes, one at a
// time, as it checks them in the store. A 16 MiB manifest of 100,000
// entries then holds its bytes and about 2 MiB more while it is scanned,
// not its bytes and every entry decoded.

// MaxManifestValue bounds a single JSON value (an entry, a string, a
// number) of a manifest Scan reads: the JSON decoder holds a value whole,
// so without it one 16 MiB string would cost several times its size. A
// sidecar's largest value is an entry of a few hundred bytes (a key is at
// most upload.MaxKeyLength).
const MaxManifestValue = 1 << 20

// errValueTooLong is a manifest value over MaxManifestValue.
var errValueTooLong = fmt.Errorf("a single JSON value of the manifest (an entry, a string or a number, with the whitespace before it) is over %d bytes: "+
	"no manifest the sidecar writes has one", MaxManifestValue)

// Scanned is a manifest Scan accepted, without its entries.
type Scanned struct {
	Version, JobID, PodUID string
	// Files and Bytes count its entries and their sizes.
	Files, Bytes int64
	// member is the "files" member that lists them (1 for the first; of
	// repeated ones the last wins, as with encoding/json), 0 if none does;
	// null says it is null.
	member int
	null   bool
}

// Manifest is s's fields as a manifest without its entries.
func (s *Scanned) Manifest() *upload.Manifest {
	return &upload.Manifest{Version: s.Version, JobID: s.JobID, PodUID: s.PodUID}
}

// Scan checks a manifest for job jobID as it streams from r, exactly as
// Decode does, but keeps none of its entries; it also refuses a single
// value over MaxManifestValue. Entries reads them again.
func Scan(r io.Reader, jobID string) (*Scanned, error) {
	s := &Scanned{}
	members := 0
	m, err := decode(cappedDecoder(r), jobID, visitor{
		files: func(null bool) {
			members++
			s.member, s.null, s.Files, s.Bytes = members, null, 0, 0
		},
		entry: func(f upload.ManifestFile) error {
			s.Files++
			s.Bytes += f.Size
			return nil
		},
		unique: true,
	})
	if err != nil {
		return nil, err
	}
	s.Version, s.JobID, s.PodUID = m.Version, m.JobID, m.PodUID
	return s, nil
}

// Entries calls fn with each of s's entries in manifest order, decoded
// again from raw, the bytes Scan accepted; fn's error stops it.
func (s *Scanned) Entries(raw []byte, fn func(upload.ManifestFile) error) error {
	members := 0
	_, err := decode(cappedDecoder(bytes.NewReader(raw)), s.JobID, visitor{
		files: func(bool) { members++ },
		entry: func(f upload.ManifestFile) error {
			if members != s.member {
				return nil
			}
			return fn(f)
		},
	})
	return err
}

// ScannedManifest is Manifest for a manifest Scan accepted from raw: its
// entries are decoded again from raw as they are checked, so no more of
// them are held than are in flight.
func ScannedManifest(ctx context.Context, b upload.Backend, key string, rank int, s *Scanned, raw []byte, workers int) (ManifestResult, error) {
	return check(ctx, b, key, rank, s.JobID, s.PodUID, s.Files, s.Bytes,
		func(fn func(upload.ManifestFile) error) error { return s.Entries(raw, fn) }, workers)
}

// cappedDecoder is a JSON decoder of r that fails rather than buffer more
// than MaxManifestValue bytes beyond the end of the last value it took.
func cappedDecoder(r io.Reader) *json.Decoder {
	c := &capped{r: r}
	c.dec = json.NewDecoder(c)
	return c.dec
}

type capped struct {
	r    io.Reader
	dec  *json.Decoder
	read int64
}

func (c *capped) Read(p []byte) (int, error) {
	// InputOffset is where the value being decoded starts: what was read
	// past it is what the decoder buffers.
	ahead := c.read - c.dec.InputOffset()
	if ahead >= MaxManifestValue {
		return 0, errValueTooLong
	}
	if room := MaxManifestValue - ahead; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	c.read += int64(n)
	return n, err
}
