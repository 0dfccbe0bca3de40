package artifacts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/upload"
)

// DefaultSettleTime is how long a file's size and mtime must stay unchanged
// before a (non-final) sync takes it as finished, when no close event took
// it first (events.go).
const DefaultSettleTime = 10 * time.Second

// ScannerConfig configures a Scanner. Dir is required.
type ScannerConfig struct {
	// Dir is the artifact directory.
	Dir string
	// Include and Exclude are doublestar globs matched against a file's
	// slash-separated path relative to Dir (jobconfig.SplitGlobs splits the
	// annotation's list). No Include means every file; an Exclude match
	// wins. A glob matches file paths, not directories: write "tmp/**" to
	// exclude a directory (such a directory is then not even walked).
	Include, Exclude []string
	// Settle is how long a file's size and mtime must be unchanged for it
	// to count as finished; 0 means DefaultSettleTime.
	Settle time.Duration
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// Scanner walks the artifact directory safely: only regular files are
// taken; a symlink is never followed (it is reported skipped, with where it
// points); nothing outside the directory is ever opened (os.Root). It
// remembers what it saw, to tell finished files from files being written.
// A Scanner is not safe for concurrent Scans.
type Scanner struct {
	dir              string
	absDir           string
	root             *os.Root
	include, exclude []string
	pruneDirs        []string // from Exclude globs "X/**": a directory matching X holds nothing to take
	settle           time.Duration
	now              func() time.Time
	// mu guards seen: a final flush may scan while a periodic round does.
	mu   sync.Mutex
	seen map[string]observation
}

type observation struct {
	size  int64
	mtime time.Time
	since time.Time // when this size and mtime were first seen
}

// LocalFile is a regular file the scan took.
type LocalFile struct {
	// Path is relative to the artifact directory, slash-separated, exactly
	// the file's name (it becomes the key after <job-id>/).
	Path    string
	Size    int64
	ModTime time.Time
	// Finished: size and mtime unchanged for the settle time (or the
	// mtime is that old), or the scan is final.
	Finished bool
}

// SkippedFile is an entry that is not an artifact by policy: a symlink or a
// special file.
type SkippedFile struct {
	Path   string
	Reason string
}

// ScanResult is what one scan found. Files are sorted by path.
type ScanResult struct {
	Files   []LocalFile
	Skipped []SkippedFile
	// Errors are artifacts that cannot be uploaded (too large, a reserved or
	// invalid name, an unreadable directory): the job's artifacts are
	// incomplete while they exist.
	Errors []*FileError
}

// NewScanner checks cfg and opens the directory.
func NewScanner(cfg ScannerConfig) (*Scanner, error) {
	if cfg.Dir == "" {
		return nil, errors.New("scanner: Dir is required")
	}
	if cfg.Settle < 0 {
		return nil, errors.New("scanner: negative Settle")
	}
	for _, g := range slices.Concat(cfg.Include, cfg.Exclude) {
		if g == "" || strings.HasPrefix(g, "/") || !doublestar.ValidatePattern(g) {
			return nil, fmt.Errorf("scanner: invalid glob %q: want a doublestar glob relative to the artifact directory", g)
		}
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("scanner: %w", err)
	}
	root, err := os.OpenRoot(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("scanner: %w", err)
	}
	s := &Scanner{
		dir: cfg.Dir, absDir: filepath.Clean(abs), root: root,
		include: slices.Clone(cfg.Include), exclude: slices.Clone(cfg.Exclude),
		settle: cfg.Settle, now: cfg.Now, seen: map[string]observation{},
	}
	if s.settle == 0 {
		s.settle = DefaultSettleTime
	}
	if s.now == nil {
		s.now = time.Now
	}
	for _, g := range cfg.Exclude {
		if p, ok := strings.CutSuffix(g, "/**"); ok && p != "" {
			s.pruneDirs = append(s.pruneDirs, p)
		}
	}
	return s, nil
}

// Root is the opened artifact directory; open files through it only.
func (s *Scanner) Root() *os.Root { return s.root }

// Dir is the artifact directory.
func (s *Scanner) Dir() string { return s.dir }

// Close closes the directory.
func (s *Scanner) Close() error { return s.root.Close() }

// Selected reports whether the include and exclude globs take rel.
func (s *Scanner) Selected(rel string) bool {
	for _, g := range s.exclude {
		if doublestar.MatchUnvalidated(g, rel) {
			return false
		}
	}
	if len(s.include) == 0 {
		return true
	}
	for _, g := range s.include {
		if doublestar.MatchUnvalidated(g, rel) {
			return true
		}
	}
	return false
}

// Scan walks the directory. final takes every regular file as finished (the
// trainer has stopped). The error is for a directory that cannot be walked
// at all; problems with single entries are in the result.
func (s *Scanner) Scan(final bool) (ScanResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var res ScanResult
	present := make(map[string]bool, len(s.seen))
	err := fs.WalkDir(s.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			res.Errors = append(res.Errors, &FileError{Path: p, Permanent: true,
				Err:  fmt.Errorf("cannot be read, so whatever it holds is not uploaded: %w", err),
				Hint: "make it readable by the sidecar, or exclude it with the " + names.ExcludeAnnotation + " annotation"})
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if p == "." {
			return nil
		}
		switch t := d.Type(); {
		case d.IsDir():
			if s.Pruned(p) {
				return fs.SkipDir
			}
			return nil
		case t&fs.ModeSymlink != 0:
			if s.Selected(p) {
				res.Skipped = append(res.Skipped, SkippedFile{Path: p, Reason: s.symlinkReason(p)})
			}
			return nil
		case !t.IsRegular():
			if s.Selected(p) {
				res.Skipped = append(res.Skipped, SkippedFile{Path: p, Reason: fmt.Sprintf("not a regular file (%s); not uploaded", t)})
			}
			return nil
		}
		if !s.Selected(p) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				res.Errors = append(res.Errors, &FileError{Path: p, Permanent: true, Err: err})
			}
			return nil
		}
		if !info.Mode().IsRegular() { // replaced since the directory was read
			return nil
		}
		if fe := checkFile(p, info); fe != nil {
			res.Errors = append(res.Errors, fe)
			return nil
		}
		present[p] = true
		res.Files = append(res.Files, LocalFile{Path: p, Size: info.Size(), ModTime: info.ModTime(),
			Finished: s.observe(p, info, now) || final})
		return nil
	})
	for p := range s.seen {
		if !present[p] {
			delete(s.seen, p)
		}
	}
	if err != nil {
		return ScanResult{}, fmt.Errorf("scan %s: %w", s.dir, err)
	}
	return res, nil
}

// checkFile refuses a regular file that cannot be an artifact: a name that
// is not UTF-8 or is reserved, or a size over a single PUT's.
func checkFile(p string, info fs.FileInfo) *FileError {
	switch why := reservedPath(p); {
	case !utf8.ValidString(p):
		return &FileError{Path: p, Permanent: true,
			Err:  errors.New("the name is not valid UTF-8, which an object key must be"),
			Hint: "rename it, or exclude it with the " + names.ExcludeAnnotation + " annotation"}
	case why != "":
		return &FileError{Path: p, Permanent: true,
			Err:  errors.New("reserved name: " + why),
			Hint: "rename or move it, or exclude it with the " + names.ExcludeAnnotation + " annotation"}
	case info.Size() > upload.MaxObjectSize:
		tl := TooLargeError{Path: p, Size: info.Size()}
		return &FileError{Path: p, Permanent: true, Err: tl, Hint: tl.hint()}
	}
	return nil
}

// Closed checks rel, a file the trainer closed after writing or renamed
// into place (a file event), as Scan would check it, and returns it as
// finished. ok is false when Scan would not take it: not selected, not a
// regular file (a symlink is never followed), gone, or refused (fe says
// why; the next Scan reports it).
func (s *Scanner) Closed(rel string) (f LocalFile, fe *FileError, ok bool) {
	if rel == "" || !fs.ValidPath(rel) || !s.Selected(rel) || s.prunedAncestor(rel) {
		return LocalFile{}, nil, false
	}
	info, err := s.root.Lstat(fsPath(rel))
	if err != nil || !info.Mode().IsRegular() {
		return LocalFile{}, nil, false
	}
	if fe := checkFile(rel, info); fe != nil {
		return LocalFile{}, fe, false
	}
	return LocalFile{Path: rel, Size: info.Size(), ModTime: info.ModTime(), Finished: true}, nil, true
}

// Pruned reports whether Scan skips the directory dir (relative,
// slash-separated) and everything under it: an Exclude glob "X/**" with X
// matching dir. File events are not watched there.
func (s *Scanner) Pruned(dir string) bool {
	for _, g := range s.pruneDirs {
		if doublestar.MatchUnvalidated(g, dir) {
			return true
		}
	}
	return false
}

func (s *Scanner) prunedAncestor(rel string) bool {
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		if s.Pruned(d) {
			return true
		}
	}
	return false
}

// observe records the file's size and mtime and reports whether it is
// finished: unchanged for the settle time, or last modified at least that
// long ago (a file already complete when the sidecar started is taken at
// once).
func (s *Scanner) observe(p string, info fs.FileInfo, now time.Time) bool {
	o, ok := s.seen[p]
	if !ok || o.size != info.Size() || !o.mtime.Equal(info.ModTime()) {
		o = observation{size: info.Size(), mtime: info.ModTime(), since: now}
		s.seen[p] = o
	}
	return now.Sub(o.since) >= s.settle || now.Sub(o.mtime) >= s.settle
}

// symlinkReason says where a symlink points, judged on its text (it is not
// resolved).
func (s *Scanner) symlinkReason(p string) string {
	target, err := s.root.Readlink(filepath.FromSlash(p))
	if err != nil {
		return "symlink (unreadable); symlinks are never followed"
	}
	outside := false
	if filepath.IsAbs(target) {
		rel, err := filepath.Rel(s.absDir, filepath.Clean(target))
		outside = err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator))
	} else {
		j := path.Join(path.Dir(p), filepath.ToSlash(target))
		outside = j == ".." || strings.HasPrefix(j, "../")
	}
	if outside {
		return fmt.Sprintf("symlink to %q, outside the artifact directory; symlinks are never followed, so it is not uploaded", target)
	}
	return fmt.Sprintf("symlink to %q; symlinks are never followed (a regular file it points to in the artifact directory is uploaded under its own name)", target)
}

// fsPath turns a slash-separated relative path into an OS one.
func fsPath(rel string) string { return filepath.FromSlash(rel) }
