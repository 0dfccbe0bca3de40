package e2e

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// diskSampler samples, every second until end, the space the files under
// some directories take (allocated blocks; a directory not there yet or
// gone counts 0) and the free space of one filesystem, and keeps each
// peak: what a scenario with large files costs the disk.
type diskSampler struct {
	fs   string // a path on the filesystem
	dirs []string
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	peak     map[string]int64 // per directory
	peakSum  int64            // of the directories together
	minFree  uint64
	baseFree uint64
}

func sampleDisk(fsPath string, dirs ...string) *diskSampler {
	s := &diskSampler{fs: fsPath, dirs: dirs, stop: make(chan struct{}), done: make(chan struct{}), peak: map[string]int64{}}
	s.baseFree = freeBytes(fsPath)
	s.minFree = s.baseFree
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				s.sample()
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *diskSampler) sample() {
	var sum int64
	sizes := make(map[string]int64, len(s.dirs))
	for _, d := range s.dirs {
		sizes[d] = allocated(d)
		sum += sizes[d]
	}
	free := freeBytes(s.fs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for d, n := range sizes {
		s.peak[d] = max(s.peak[d], n)
	}
	s.peakSum = max(s.peakSum, sum)
	if free > 0 {
		s.minFree = min(s.minFree, free)
	}
}

// end stops sampling and describes the peaks.
func (s *diskSampler) end() string {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "peak of the directories together %.2f GiB; the filesystem's free space fell by up to %.2f GiB (%.2f GiB free at the start, anything else on it counted too)",
		gib(s.peakSum), gib(int64(s.baseFree-s.minFree)), gib(int64(s.baseFree)))
	for _, d := range s.dirs {
		fmt.Fprintf(&b, "; %s: peak %.2f GiB", d, gib(s.peak[d]))
	}
	return b.String()
}

func gib(n int64) float64 { return float64(n) / (1 << 30) }

// allocated is the space the files under dir take on disk.
func allocated(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile, or not there yet
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// freeBytes is the space available on path's filesystem (0 if unknown).
func freeBytes(path string) uint64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0
	}
	return st.Bavail * uint64(st.Bsize)
}
