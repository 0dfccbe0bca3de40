package artifacts

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/tether-dev/tether/pkg/upload"
)

// smallFileSize: a file smaller than this is read whole into memory and
// sent with its Content-MD5 in one PUT, without the HEAD a larger file's
// upload starts with. The server compares that MD5 with what the key (or
// its pending key) holds and stores nothing when they are equal, so an
// unchanged file is still never stored again, in one round trip instead of
// two; its body costs less to send than the round trip it saves (the same
// bound as expectContinueMin). test/performance/sync BenchmarkSmallFiles
// measures it.
const smallFileSize = expectContinueMin

// smallBuffers hold one small file each while it is sent: at most one per
// upload worker.
var smallBuffers = sync.Pool{New: func() any { b := make([]byte, smallFileSize); return &b }}

// uploadSmall verifies the small regular file f (opened as rel, st its
// state then): read once into memory, hashed, checked unchanged, sent.
func (u *Uploader) uploadSmall(ctx context.Context, f *os.File, st fs.FileInfo, rel, key string) (Result, error) {
	size := st.Size()
	bp := smallBuffers.Get().(*[]byte)
	defer smallBuffers.Put(bp)
	buf := (*bp)[:size]
	if n, err := io.ReadFull(f, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return Result{}, fmt.Errorf("%w (read %d of %d bytes)", errChanged, n, size)
		}
		return Result{}, &localError{err}
	}
	// What is sent is what was read, and only while the file is as it was
	// opened: checked again before the body's last bytes go, so a file that
	// changed while it was read is never stored (it waits for its next
	// close or settle), and once more after the answer.
	sum := md5.Sum(buf)
	check := func() error { return unchanged(f, st) }
	got, crc, err := u.putSum(ctx, key, &lastBytesGuard{r: bytes.NewReader(buf), remaining: size, check: check}, size, sum[:], upload.CRC64NVMEOf(buf))
	if err != nil {
		if errors.Is(err, errChanged) {
			return Result{}, fmt.Errorf("PUT %s: %w", key, errChanged)
		}
		return Result{}, err
	}
	if err := check(); err != nil {
		return Result{}, err
	}
	return u.verifiedAs(rel, size, st.ModTime(), got, crc, Uploaded), nil
}
