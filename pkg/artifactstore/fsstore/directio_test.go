//go:build linux

package fsstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tempFlags returns the open flags of this process's descriptors of files
// under dir (from /proc/self/fdinfo).
func tempFlags(t *testing.T, dir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var flags []int64
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				f, err := strconv.ParseInt(strings.TrimSpace(v), 8, 64)
				if err == nil {
					flags = append(flags, f)
				}
			}
		}
	}
	return flags
}

// probeReader calls probe once, after the first read.
type probeReader struct {
	r     io.Reader
	probe func()
	done  bool
}

func (p *probeReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if !p.done {
		p.done = true
		p.probe()
	}
	return n, err
}

// Large objects are written with O_DIRECT, whole and exact whatever their
// tail; small ones through the page cache.
func TestFSBackendDirectIO(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	b, err := NewFSBackend(root)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tmpDir := filepath.Join(root, ".tether", "tmp")
	for _, size := range []int{
		directIOMinSize - 1,                        // page cache
		directIOMinSize,                            // whole chunks
		directIOMinSize + 1,                        // a 1-byte tail
		directIOMinSize + 512,                      // a tail aligned for 512-byte blocks only
		directIOMinSize + 2*directIOChunk + 4095,   // more chunks, a long tail
		directIOMinSize + directIOChunk/2 + 3*4096, // a tail of whole blocks, shorter than a chunk
	} {
		body := data(size, byte(size))
		key := "job/obj-" + strconv.Itoa(size)
		var flags []int64
		src := &probeReader{r: bytes.NewReader(body), probe: func() { flags = tempFlags(t, tmpDir) }}
		info, err := b.Put(ctx, key, src, int64(size))
		if err != nil {
			t.Fatalf("Put %d bytes: %v", size, err)
		}
		if info.ETag != md5hex(body) || info.Size != int64(size) {
			t.Errorf("Put %d bytes: %+v, want ETag %s", size, info, md5hex(body))
		}
		got, err := os.ReadFile(filepath.Join(root, "job", "obj-"+strconv.Itoa(size)))
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("stored %d bytes: %d bytes read back, equal %v, %v", size, len(got), bytes.Equal(got, body), err)
		}
		if len(flags) != 1 {
			t.Fatalf("Put %d bytes: %d temporary files open, want 1", size, len(flags))
		}
		if wantDirect := size >= directIOMinSize; (flags[0]&unix.O_DIRECT != 0) != wantDirect {
			t.Errorf("Put %d bytes: O_DIRECT %v, want %v", size, flags[0]&unix.O_DIRECT != 0, wantDirect)
		}
	}

	// A body shorter than announced, or failing, keeps nothing.
	body := data(directIOMinSize+3*directIOChunk, 9)
	if _, err := b.Put(ctx, "job/short", bytes.NewReader(body[:len(body)-10]), int64(len(body))); err == nil {
		t.Error("a short body was stored")
	}
	broken := io.MultiReader(bytes.NewReader(body[:directIOMinSize+100]), errReader{})
	if _, err := b.Put(ctx, "job/broken", broken, int64(len(body))); !errors.Is(err, errBroken) {
		t.Errorf("a failing body: %v", err)
	}
	if _, err := b.Put(ctx, "job/long", bytes.NewReader(append(body, 1)), int64(len(body))); err == nil {
		t.Error("a long body was stored")
	}
	for _, k := range []string{"job/short", "job/broken", "job/long"} {
		if _, err := b.Head(ctx, k); err == nil {
			t.Errorf("%s stored", k)
		}
	}
	if left, _ := os.ReadDir(tmpDir); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

var errBroken = errors.New("connection reset")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBroken }
