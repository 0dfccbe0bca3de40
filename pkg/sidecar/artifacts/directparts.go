package artifacts

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"

	"github.com/tether-dev/tether/pkg/upload"
)

// A direct upload in parts (docs/artifacts.md, "Files in parts"): the
// server created a multipart upload and signs single parts; the sidecar
// streams the file once, part after part, each to its URL, computing each
// part's MD5 and the whole file's MD5 and CRC-64/NVME as it reads, and
// commits with the parts' MD5s. It never completes the upload: the server
// does, after checking every part. A part the store already holds (a
// resumed upload: the answer's Stored) is read, not sent, if its MD5 is
// the stored part's ETag.

// partsUpload is one direct upload in parts in flight.
type partsUpload struct {
	u    *Uploader
	key  string
	size int64
	a    upload.AuthorizeResponse
	// urls are the presigned parts not used yet, by number.
	urls   map[int]upload.PartURL
	stored map[int]upload.StoredPart
	whole  hash.Hash
	crc    hash.Hash64
	parts  []upload.CommitPart
	// resumed counts the bytes of parts found stored (read, not sent).
	resumed int64
	// file reads a part again where the store holds other bytes for it
	// (nil: the body is not a file).
	file io.ReaderAt
}

// putDirectParts sends size bytes of body as a direct upload in parts and
// returns their MD5, CRC-64/NVME and how many bytes were found stored.
func (u *Uploader) putDirectParts(ctx context.Context, key string, a upload.AuthorizeResponse, body io.Reader, size int64) (sent, error) {
	if a.PartSize < upload.MinPartSize && size > a.PartSize || a.PartSize <= 0 {
		return sent{}, fmt.Errorf("authorizing %s: the server answered parts of %d bytes", key, a.PartSize)
	}
	p := &partsUpload{u: u, key: key, size: size, a: a, urls: map[int]upload.PartURL{}, stored: map[int]upload.StoredPart{},
		whole: md5.New(), crc: upload.NewCRC64NVME()}
	if g, ok := body.(*lastBytesGuard); ok {
		p.file, _ = g.r.(io.ReaderAt)
	}
	p.addURLs(a.Parts)
	for _, s := range a.Stored {
		p.stored[s.Number] = s
	}
	n := upload.Parts(size, a.PartSize)
	for i := 1; i <= n; i++ {
		if err := p.part(ctx, body, i, min(a.PartSize, size-int64(i-1)*a.PartSize)); err != nil {
			return sent{}, err
		}
	}
	res := sent{md5: hex.EncodeToString(p.whole.Sum(nil)), crc: upload.EncodeChecksum(p.crc.Sum(nil)), resumed: p.resumed}
	return res, p.commit(ctx, res)
}

func (p *partsUpload) addURLs(urls []upload.PartURL) {
	for _, pu := range urls {
		p.urls[pu.Number] = pu
	}
}

// part reads part i (size bytes) of body and sends it unless the store
// holds it already.
func (p *partsUpload) part(ctx context.Context, body io.Reader, i int, size int64) error {
	sum := md5.New()
	src := io.TeeReader(io.LimitReader(body, size), io.MultiWriter(sum, p.whole, p.crc))
	s, ok := p.stored[i]
	if !ok || s.Size != size {
		return p.send(ctx, i, size, src, sum)
	}
	// Read to hash it (the file's bytes, not the store's, decide).
	if n, err := io.Copy(io.Discard, src); err != nil || n != size {
		return fmt.Errorf("reading part %d of %s: %w", i, p.key, orChanged(err))
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if strings.EqualFold(s.ETag, got) {
		p.parts = append(p.parts, upload.CommitPart{Number: i, MD5: got})
		p.resumed += size
		return nil
	}
	// The store holds other bytes for the part (a PUT cut short that the
	// store kept, or the file changed): the part is read again from the
	// file and sent, and must be the bytes hashed the first time.
	if p.file == nil {
		p.u.restartParts.Store(p.key, true)
		return fmt.Errorf("part %d of %s: %w (the store holds other bytes for it)", i, p.key, errChanged)
	}
	again := md5.New()
	if err := p.send(ctx, i, size, io.TeeReader(io.NewSectionReader(p.file, int64(i-1)*p.a.PartSize, size), again), again); err != nil {
		return err
	}
	if hex.EncodeToString(again.Sum(nil)) != got {
		return fmt.Errorf("part %d of %s: %w (its bytes differ between two reads)", i, p.key, errChanged)
	}
	return nil
}

// send PUTs part i from src, read for the first time.
func (p *partsUpload) send(ctx context.Context, i int, size int64, src io.Reader, sum hash.Hash) error {
	pu, err := p.url(ctx, i)
	if err != nil {
		return err
	}
	if pu.Size != size {
		return fmt.Errorf("part %d of %s: the server signed %d bytes, the part has %d", i, p.key, pu.Size, size)
	}
	hd := http.Header{}
	for k, v := range pu.Headers {
		hd.Set(k, v)
	}
	resp, err := p.u.storePut(ctx, fmt.Sprintf("direct PUT of part %d of %s", i, p.key), pu.URL, hd, src, size)
	if err != nil {
		return err
	}
	got := hex.EncodeToString(sum.Sum(nil))
	if err := checkSum(p.key, got, resp.Get("ETag")); err != nil {
		return fmt.Errorf("part %d: %w", i, err)
	}
	p.parts = append(p.parts, upload.CommitPart{Number: i, MD5: got})
	return nil
}

// url is part i's presigned URL, asking the server for the next batch
// when the ones it gave are used up.
func (p *partsUpload) url(ctx context.Context, i int) (upload.PartURL, error) {
	if pu, ok := p.urls[i]; ok {
		delete(p.urls, i)
		return pu, nil
	}
	var r upload.PartsResponse
	if _, err := p.u.postJSON(ctx, p.u.direct.api, upload.PathParts, upload.PartsRequest{Key: p.key, Size: p.size, Upload: p.a.Upload, From: i}, &r); err != nil {
		return upload.PartURL{}, fmt.Errorf("asking for the part URLs of %s: %w", p.key, err)
	}
	p.addURLs(r.Parts)
	pu, ok := p.urls[i]
	if !ok {
		return upload.PartURL{}, fmt.Errorf("asking for the part URLs of %s: the answer has no part %d", p.key, i)
	}
	delete(p.urls, i)
	return pu, nil
}

// commit asks the server to complete the upload and checks its answer.
func (p *partsUpload) commit(ctx context.Context, res sent) error {
	var cr upload.CommitResponse
	cctx, ccancel := context.WithTimeout(ctx, upload.CommitTimeout(responseHeaderTimeout, p.size))
	defer ccancel()
	req := upload.CommitRequest{Key: p.key, Size: p.size, MD5: res.md5, CRC64NVME: res.crc, Upload: p.a.Upload, Parts: p.parts}
	if _, err := p.u.postJSON(cctx, p.u.direct.commit, upload.PathCommit, req, &cr); err != nil {
		return fmt.Errorf("committing %s: %w", p.key, err)
	}
	if cr.Size != p.size || cr.CRC64NVME != res.crc {
		return fmt.Errorf("committing %s: %w: the server completed %d bytes with CRC-64/NVME %q; the bytes sent are %d with %s",
			p.key, errETagMismatch, cr.Size, cr.CRC64NVME, p.size, res.crc)
	}
	return nil
}

// orChanged is err, or errChanged for a file that ended early.
func orChanged(err error) error {
	if err == nil {
		return errChanged
	}
	return &localError{err}
}
