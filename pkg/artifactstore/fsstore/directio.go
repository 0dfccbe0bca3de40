package fsstore

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Large objects are written with direct I/O (O_DIRECT, where the platform
// and file system have it), as minio's xl-storage writes its large parts:
// the bytes go from the server's buffer to the disk instead of through the
// page cache, which on a 1 GiB PUT costs the kernel more CPU than the MD5
// does (test/performance/upload server-cpu-s-per-gib; dd on this machine: 2.9 s of
// system time per GiB buffered and fsynced, 0.15 s direct). The object is
// still fsynced (its size and blocks, and the disk's cache) before it is
// renamed into place. Small objects keep the page cache: a direct write
// waits for the disk, which a 2 KiB object does not repay.
const (
	// directIOMinSize is the smallest object written directly.
	directIOMinSize = 4 << 20
	// directIOAlign aligns direct writes' buffers, lengths and offsets (the
	// logical block size is 512 or 4096 bytes).
	directIOAlign = 4096
	// directIOChunk is one direct write (dd on this machine: 1.1 GB/s in
	// 1 MiB writes, 0.58 GB/s in 256 KiB ones).
	directIOChunk = 1 << 20
)

// directBuffers are aligned directIOChunk buffers.
var directBuffers = sync.Pool{New: func() any {
	b := make([]byte, directIOChunk+directIOAlign)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) % directIOAlign); r != 0 {
		off = directIOAlign - r
	}
	b = b[off : off+directIOChunk : off+directIOChunk]
	return &b
}}

// copyDirect copies src to f, opened with oDirect, from f's offset (a
// multiple of directIOAlign), and into h (its hashes): whole aligned
// chunks directly, the last partial chunk through the page cache (direct
// I/O cannot write it). Reading the next chunk (and hashing it) overlaps
// the write of the one before. It returns the bytes read from src.
func copyDirect(f *os.File, src io.Reader, h io.Writer) (int64, error) {
	free := make(chan *[]byte, 2)
	for range 2 {
		free <- directBuffers.Get().(*[]byte)
	}
	defer func() {
		for range 2 {
			directBuffers.Put(<-free)
		}
	}()
	type chunk struct {
		buf *[]byte
		n   int
	}
	work := make(chan chunk, 1)
	var failed atomic.Bool
	werr := make(chan error, 1)
	go func() {
		var err error
		for c := range work {
			if err == nil {
				if err = writeChunk(f, (*c.buf)[:c.n]); err != nil {
					failed.Store(true)
				}
			}
			free <- c.buf
		}
		werr <- err
	}()
	var n int64
	var rerr error
	for !failed.Load() {
		buf := <-free
		m, err := io.ReadFull(src, *buf)
		if m > 0 {
			_, _ = h.Write((*buf)[:m])
			n += int64(m)
			work <- chunk{buf, m}
		} else {
			free <- buf
		}
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	close(work)
	if err := <-werr; err != nil {
		return n, err
	}
	return n, rerr
}

// writeChunk writes p at f's offset: directly if it is whole blocks, else
// (the object's tail) through the page cache. A file system that takes the
// flag but not the write gets the rest through the page cache too.
func writeChunk(f *os.File, p []byte) error {
	if len(p)%directIOAlign != 0 {
		if err := clearDirect(f); err != nil {
			return err
		}
		_, err := f.Write(p)
		return err
	}
	n, err := f.Write(p)
	if errors.Is(err, syscall.EINVAL) {
		if serr := clearDirect(f); serr != nil {
			return serr
		}
		_, err = f.Write(p[n:])
	}
	return err
}
