package checkpoint

import (
	"slices"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// dcpMetadata is the file a PyTorch Distributed Checkpoint writes last;
// dcpData ends the name of each rank's data file.
const (
	dcpMetadata = ".metadata"
	dcpData     = ".distcp"
)

// File is one artifact file as a Detector sees it.
type File struct {
	// Path is relative to the artifact directory, '/'-separated.
	Path string
	Size int64
	// Verified: the store holds this very version of the file, checked end
	// to end (a file changed since it was verified is not); VerifiedAt is
	// when it was verified.
	Verified   bool
	VerifiedAt time.Time
}

// Detector finds the newest complete checkpoint among files. It is
// immutable and safe for concurrent use.
type Detector struct {
	patterns []Pattern
	// decisive are the file names whose presence decides whether a
	// directory checkpoint is complete: every pattern's required files and
	// DCP's metadata.
	decisive map[string]bool
}

// NewDetector returns a Detector of patterns, in order of precedence: the
// first pattern that matches a checkpoint names its step, and every one
// that matches it adds its required files. Without patterns it uses
// Default().
func NewDetector(patterns ...Pattern) *Detector {
	var ps []Pattern
	for _, p := range patterns {
		if len(p.comps) > 0 { // the zero Pattern matches nothing
			ps = append(ps, p)
		}
	}
	if len(patterns) == 0 {
		ps = Default()
	}
	d := &Detector{patterns: ps, decisive: map[string]bool{dcpMetadata: true}}
	for _, p := range ps {
		for _, n := range p.required {
			d.decisive[n] = true
		}
	}
	return d
}

// Patterns returns the Detector's patterns.
func (d *Detector) Patterns() []Pattern { return slices.Clone(d.patterns) }

// candidate is a checkpoint some file belongs to, as the files are counted.
type candidate struct {
	path       string
	step       int64
	dir        bool
	files      int
	bytes      int64
	unverified int
	verifiedAt time.Time
	required   []string
	// present are the names, among those that decide completeness, of the
	// files directly in a directory checkpoint; distcp: it holds DCP data.
	present  map[string]bool
	distcp   bool
	lastFile int // index of the last file counted, so none counts twice
}

// Newest returns the checkpoint of the highest step whose every file is
// verified and whose required files are present (ties: the one verified
// last), or nil when there is none. Its work is linear in the files (times
// the patterns and each path's depth).
func (d *Detector) Newest(files []File) *binding.Checkpoint {
	cands := map[string]*candidate{}
	for i, f := range files {
		parts := splitPath(f.Path)
		for _, p := range d.patterns {
			path, step, ok := p.match(f.Path, parts)
			if !ok {
				continue
			}
			c := cands[path]
			if c == nil {
				c = &candidate{path: path, step: step, dir: p.dir, lastFile: -1}
				cands[path] = c
			}
			c.require(p.required)
			if c.lastFile != i {
				c.lastFile = i
				c.add(f, d.decisive)
			}
		}
	}
	var best *candidate
	for _, c := range cands {
		if c.complete() && (best == nil || c.newerThan(best)) {
			best = c
		}
	}
	if best == nil {
		return nil
	}
	return &binding.Checkpoint{Path: best.path, Step: best.step, Files: best.files, Bytes: best.bytes, VerifiedAt: best.verifiedAt}
}

func (c *candidate) require(names []string) {
	for _, n := range names {
		if !slices.Contains(c.required, n) {
			c.required = append(c.required, n)
		}
	}
}

func (c *candidate) add(f File, decisive map[string]bool) {
	c.files++
	c.bytes += max(f.Size, 0)
	if !f.Verified {
		c.unverified++
	} else if f.VerifiedAt.After(c.verifiedAt) {
		c.verifiedAt = f.VerifiedAt
	}
	if !c.dir {
		return
	}
	name := f.Path[len(c.path):]
	if strings.Contains(name, "/") {
		return
	}
	c.distcp = c.distcp || strings.HasSuffix(name, dcpData)
	if decisive[name] { // only these: the map stays small

		if c.present == nil {
			c.present = map[string]bool{}
		}
		c.present[name] = true
	}
}

// complete: every file verified, every required file present, a DCP
// directory with its metadata, and a path a heartbeat can carry.
func (c *candidate) complete() bool {
	if c.files == 0 || c.unverified > 0 || len(c.path) > binding.MaxReportedPathLength {
		return false
	}
	if c.distcp && !c.present[dcpMetadata] {
		return false
	}
	for _, n := range c.required {
		if !c.present[n] {
			return false
		}
	}
	return true
}

// newerThan orders complete checkpoints: the higher step, then the one
// verified last, then the path (so that the answer does not depend on map
// order).
func (c *candidate) newerThan(o *candidate) bool {
	switch {
	case c.step != o.step:
		return c.step > o.step
	case !c.verifiedAt.Equal(o.verifiedAt):
		return c.verifiedAt.After(o.verifiedAt)
	}
	return c.path < o.path
}
