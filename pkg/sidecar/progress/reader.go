package progress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/tether-dev/tether/pkg/binding"
)

// DefaultWindow is how much of the end of the progress file a
// Reader reads: the last complete line must fit in it.
const DefaultWindow = 64 << 10

// Reader reports the last complete line of a trainer's progress file
// (ProgressFile in the artifact directory: one JSON object per line, each line
// ending in "\n", e.g. {"step":100,"epoch":1.5,"loss":0.23,"fraction":0.4}).
//
// Every Read looks at the file afresh, so a file that is rewritten, truncated
// or replaced is followed. Only a bounded window at the end of the file is
// read, however large the file grows. A trailing line without its "\n" is
// still being written and is ignored; lines that are not a JSON object with at
// least one known field (garbage, other logs) are skipped in favour of the
// line before them. Unknown fields are ignored.
//
// The file is written by the trainer, which the sidecar does not trust: only
// a regular file is read (not a symlink, FIFO or device), and values the
// protocol would reject (a fraction outside [0,1]) are dropped.
//
// A Reader is safe for concurrent use.
type Reader struct {
	// Path of the progress file.
	Path string
	// Window bounds the bytes read from the end of the file; 0 means
	// DefaultWindow.
	Window int64
}

// NewReader reads ProgressFile in artifactDir.
func NewReader(artifactDir string) *Reader {
	return &Reader{Path: filepath.Join(artifactDir, binding.ProgressFile)}
}

// errNotRegular reports a progress path that is not a regular file.
var errNotRegular = errors.New("not a regular file")

// Read returns the progress in the last valid complete line, with UpdatedAt
// set to the file's modification time. It returns (nil, nil) when the file
// does not exist or holds no valid complete line in the window.
func (r *Reader) Read() (*binding.Progress, error) {
	// Lstat first: opening a FIFO would block, and a symlink could point
	// anywhere in the sidecar's file system.
	st, err := os.Lstat(r.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("progress file %s: %w", r.Path, errNotRegular)
	}
	f, err := os.Open(r.Path)
	if errors.Is(err, fs.ErrNotExist) { // removed in between
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fst, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !os.SameFile(st, fst) || !fst.Mode().IsRegular() {
		// Replaced between Lstat and Open; the next Read sees the new one.
		return nil, nil
	}
	window := r.Window
	if window <= 0 {
		window = DefaultWindow
	}
	size := fst.Size()
	start := max(size-window, 0)
	buf := make([]byte, size-start)
	n, err := f.ReadAt(buf, start)
	if err != nil && !errors.Is(err, io.EOF) { // EOF: truncated while reading
		return nil, err
	}
	p := lastProgressLine(buf[:n], start > 0)
	if p != nil {
		p.UpdatedAt = fst.ModTime().UTC()
	}
	return p, nil
}

// Progress is Read for ClientConfig.Progress: nil when there is no progress
// or it cannot be read.
func (r *Reader) Progress() *binding.Progress {
	p, err := r.Read()
	if err != nil {
		return nil
	}
	return p
}

// lastProgressLine returns the last complete line of buf that is valid
// progress. cutStart says buf begins in the middle of the file, so its first
// line may be the tail of a longer one and is not considered.
func lastProgressLine(buf []byte, cutStart bool) *binding.Progress {
	end := bytes.LastIndexByte(buf, '\n')
	for end >= 0 {
		lineStart := bytes.LastIndexByte(buf[:end], '\n') + 1
		if lineStart == 0 && cutStart {
			return nil
		}
		if p := parseProgressLine(buf[lineStart:end]); p != nil {
			return p
		}
		end = lineStart - 1
	}
	return nil
}

// progressLine is the JSON a trainer writes; float64 for step so that "100.0"
// is accepted too.
type progressLine struct {
	Step     *float64 `json:"step"`
	Epoch    *float64 `json:"epoch"`
	Loss     *float64 `json:"loss"`
	Fraction *float64 `json:"fraction"`
}

func parseProgressLine(line []byte) *binding.Progress {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	var l progressLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil
	}
	p := &binding.Progress{Epoch: l.Epoch, Loss: l.Loss, Fraction: l.Fraction}
	if s := l.Step; s != nil && !math.IsNaN(*s) && !math.IsInf(*s, 0) && *s >= math.MinInt64 && *s < math.MaxInt64 {
		v := int64(*s)
		p.Step = &v
	}
	return p.Sanitized()
}
