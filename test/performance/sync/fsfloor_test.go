package sync_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fsFloor stores the n files under src the least durable way the fs
// backend's contract allows, straight on the store's file system with
// workers at once and nothing else (no HTTP, TLS, MD5 or metadata): each
// file's content written to a temporary file, fsynced, renamed into its
// directory (100 per directory), the directory fsynced. It is what the disk
// allows a store that never shows a partial object and answers only once the
// object is durable: the floor small-files-per-s is measured against.
func fsFloor(b *testing.B, src string, storeParent string, workers int) float64 {
	b.Helper()
	parent := storeParent
	if parent == "" {
		parent = b.TempDir()
	}
	root, err := os.MkdirTemp(parent, "tether-bench-fs-floor-")
	if err != nil {
		b.Fatal(err)
	}
	// Removed at the end of the benchmark, not before the runs measured after
	// it: ext4 without a journal (this machine's root file system) skips
	// every inode deleted in the last 30 s when it allocates one, one buffer
	// lookup each, so 10,000 files deleted here would make each create in
	// the next run cost up to 250 µs of CPU (perf: recently_deleted,
	// find_get_block_common).
	b.Cleanup(func() { _ = os.RemoveAll(root) })
	var files []string
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	contents := make([][]byte, len(files))
	for i, p := range files {
		if contents[i], err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
	tmpDir := filepath.Join(root, "tmp")
	if err := os.Mkdir(tmpDir, 0o755); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var failed atomic.Pointer[error]
	store := func(i int) error {
		dir := filepath.Join(root, "shard-"+strconv.Itoa(i/100))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		tmp := filepath.Join(tmpDir, strconv.Itoa(i))
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(contents[i])
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, filepath.Join(dir, strconv.Itoa(i)))
		}
		if err != nil {
			return err
		}
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		err = d.Sync()
		_ = d.Close()
		return err
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for failed.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(files) {
					return
				}
				if err := store(i); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	wg.Wait()
	if e := failed.Load(); e != nil {
		b.Fatalf("file-system floor: %v", *e)
	}
	rate := float64(len(files)) / time.Since(t0).Seconds()
	progress("%d small files straight on the store's file system (write, fsync, rename, fsync the directory), %d at once: %.0f files/s",
		len(files), workers, rate)
	return rate
}

// isTmpfs: dir is a tmpfs mount (memory: its fsyncs cost nothing).
func isTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}
