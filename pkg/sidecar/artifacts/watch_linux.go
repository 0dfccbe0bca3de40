//go:build linux

package artifacts

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// Hand-written on golang.org/x/sys/unix: fsnotify (the one well-kept Go
// library for this) keeps IN_CLOSE_WRITE unexported (its "unportable" ops),
// and close-after-write is the one event that says a file is complete.

// watchMask: a file closed after writing or renamed in; a directory
// created, renamed in or out (watches follow it). IN_ONLYDIR and
// IN_DONT_FOLLOW: a watch is only ever put on a directory itself, never
// through a symlink.
const watchMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE |
	unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

// inotifyEventSize is sizeof(struct inotify_event) without its name.
const inotifyEventSize = unix.SizeofInotifyEvent

// watcher collects the files the trainer closes after writing or renames
// into place, by inotify, one watch per directory (inotify does not
// recurse: a new directory gets its watch when its creation is seen). Its
// queue is a bounded set of paths; beyond maxPendingEvents, or when the
// kernel's queue overflowed, it reports an overflow (events were lost) and
// starts again empty.
type watcher struct {
	sc      *Scanner
	absDir  string
	f       *os.File // the inotify descriptor, read through the runtime poller
	fd      int
	ready   chan struct{} // cap 1: something to Take
	stopped chan struct{} // closed when the read loop ends

	// addWatch is unix.InotifyAddWatch (tests replace it to hit the limits).
	addWatch func(fd int, pathname string, mask uint32) (int, error)

	mu       sync.Mutex
	wds      map[int32]string // watch descriptor → directory, relative ("" for the top)
	pending  map[string]struct{}
	overflow bool
	err      error // watching stopped for good (a limit reached): the settle rule takes over
}

// newWatcher starts watching the Scanner's directory tree. The error is
// an *eventsUnavailableError when inotify cannot be used (no instance or
// watch left under the per-uid limits, or no inotify at all).
func newWatcher(sc *Scanner, addWatch func(int, string, uint32) (int, error)) (*watcher, error) {
	if addWatch == nil {
		addWatch = unix.InotifyAddWatch
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, limitError("inotify_init1", err)
	}
	w := &watcher{sc: sc, absDir: sc.absDir, fd: fd, f: os.NewFile(uintptr(fd), "inotify"),
		ready: make(chan struct{}, 1), stopped: make(chan struct{}), addWatch: addWatch,
		wds: map[int32]string{}, pending: map[string]struct{}{}}
	if err := w.addTree("", false); err != nil {
		w.f.Close()
		return nil, err
	}
	go w.readLoop()
	return w, nil
}

// watches is the number of directories watched.
func (w *watcher) watches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.wds)
}

// Close stops watching.
func (w *watcher) Close() error {
	err := w.f.Close() // wakes the read loop
	<-w.stopped
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// Ready is signalled when Take has something.
func (w *watcher) Ready() <-chan struct{} { return w.ready }

// Take returns the paths collected since the last Take, sorted; overflow:
// events were lost since then; err: watching stopped for good.
func (w *watcher) Take() (paths []string, overflow bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p := range w.pending {
		paths = append(paths, p)
	}
	clear(w.pending)
	overflow, w.overflow = w.overflow, false
	slices.Sort(paths)
	return paths, overflow, w.err
}

func (w *watcher) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

func (w *watcher) readLoop() {
	defer close(w.stopped)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.fail(fmt.Errorf("reading inotify events: %w", err))
			}
			return
		}
		w.mu.Lock()
		for off := 0; off+inotifyEventSize <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			end := min(off+inotifyEventSize+nameLen, n)
			name := string(trimNUL(buf[off+inotifyEventSize : end]))
			off = end
			w.handleLocked(wd, mask, name)
		}
		failed := w.err != nil
		w.mu.Unlock()
		w.signal()
		if failed {
			return
		}
	}
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func (w *watcher) handleLocked(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.overflowLocked()
		return
	}
	dir, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 {
		delete(w.wds, wd) // the directory is gone (or its watch removed)
		return
	}
	if !ok || name == "" {
		return
	}
	rel := path.Join(dir, name)
	if mask&unix.IN_ISDIR != 0 {
		switch {
		case mask&unix.IN_MOVED_FROM != 0:
			w.unwatchLocked(rel)
		case mask&unix.IN_CREATE != 0:
			// Files made in it before its watch was in place are found by
			// the listing but left to the settle rule: nothing says they
			// were closed.
			w.addTreeLocked(rel, false)
		case mask&unix.IN_MOVED_TO != 0:
			// A directory renamed into place: its files are published.
			w.addTreeLocked(rel, true)
		}
		return
	}
	switch {
	case mask&(unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO) != 0:
		w.addPendingLocked(rel)
	case mask&unix.IN_MOVED_FROM != 0:
		delete(w.pending, rel) // renamed away before it was taken
	}
}

func (w *watcher) addPendingLocked(rel string) {
	if w.overflow {
		return // everything is rescanned anyway
	}
	if len(w.pending) >= maxPendingEvents {
		w.overflowLocked()
		return
	}
	w.pending[rel] = struct{}{}
}

func (w *watcher) overflowLocked() {
	w.overflow = true
	clear(w.pending)
}

// unwatchLocked drops the watches of rel and below (renamed away; a rename
// within the tree adds them again under the new name).
func (w *watcher) unwatchLocked(rel string) {
	for wd, d := range w.wds {
		if d == rel || len(d) > len(rel) && d[len(rel)] == '/' && d[:len(rel)] == rel {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.wds, wd)
		}
	}
	for p := range w.pending {
		if len(p) > len(rel) && p[len(rel)] == '/' && p[:len(rel)] == rel {
			delete(w.pending, p)
		}
	}
}

func (w *watcher) addTree(rel string, published bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addTreeLocked(rel, published)
	return w.err
}

// addTreeLocked watches rel and every directory below it the scan would
// walk, each before it is listed, so that a file made after the listing has
// its event. published: the files found are taken as closed (a directory
// renamed into place). A limit reached stops watching altogether (w.err).
func (w *watcher) addTreeLocked(rel string, published bool) {
	if w.err != nil {
		return
	}
	start := "."
	if rel != "" {
		start = rel
	}
	_ = fs.WalkDir(w.sc.root.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			// Gone or unreadable: the scan reports what it cannot read.
			if d != nil && d.IsDir() || p == start {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != "." && w.sc.Pruned(p) {
				return fs.SkipDir
			}
			r := p
			if p == "." {
				r = ""
			}
			wd, err := w.addWatch(w.fd, filepath.Join(w.absDir, filepath.FromSlash(r)), watchMask)
			switch {
			case err == nil:
				w.wds[int32(wd)] = r
			case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.ENOMEM):
				w.err = limitError("inotify_add_watch", err)
				return fs.SkipAll
			case r == "" && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EACCES):
				// The top directory cannot be watched at all (a file
				// system without inotify support).
				w.err = &eventsUnavailableError{reason: fmt.Sprintf("inotify_add_watch %s: %v", w.absDir, err)}
				return fs.SkipAll
			default:
				return fs.SkipDir // gone, unreadable, or replaced by a non-directory
			}
			return nil
		}
		if published && d.Type().IsRegular() {
			w.addPendingLocked(p)
		}
		return nil
	})
}

// fail stops watching for good.
func (w *watcher) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = &eventsUnavailableError{reason: err.Error()}
	}
	w.mu.Unlock()
	w.signal()
}

// limitError names the per-uid inotify limit an error hit, and how to
// raise it.
func limitError(op string, err error) error {
	switch {
	case errors.Is(err, unix.EMFILE):
		return &eventsUnavailableError{reason: op + ": " + err.Error(), limit: "fs.inotify.max_user_instances"}
	case errors.Is(err, unix.ENOSPC):
		return &eventsUnavailableError{reason: op + ": " + err.Error(), limit: "fs.inotify.max_user_watches"}
	}
	return &eventsUnavailableError{reason: op + ": " + err.Error()}
}
