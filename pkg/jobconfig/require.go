package jobconfig

import (
	"fmt"
	"strings"

	"github.com/tether-dev/tether/api/names"
)

// Bounds of names.RequireAnnotation: the globs are recorded on the
// WorkerBinding (whose CRD states the same bounds) and matched against
// every path of the job's final manifests.
const (
	MaxRequireGlobs     = 32
	MaxRequireGlobBytes = 256
)

// RequireExample is a valid value of names.RequireAnnotation.
const RequireExample = "model/*.safetensors,config.json"

// parseRequire reads names.RequireAnnotation: the job's required outputs.
func parseRequire(annotations map[string]string) ([]string, error) {
	v, ok := annotations[names.RequireAnnotation]
	if !ok {
		return nil, nil
	}
	globs, err := ParseRequireList(v)
	if err != nil {
		return nil, &InvalidAnnotationError{Key: names.RequireAnnotation, Value: v, Problem: err.Error(), Example: RequireExample}
	}
	return globs, nil
}

// ParseRequireList splits a comma-separated list of required-output globs
// (SplitGlobs) and checks each: well-formed, relative to the job's prefix,
// naming files (no empty, '.' or '..' segment, no trailing '/'), and
// within MaxRequireGlobs and MaxRequireGlobBytes.
func ParseRequireList(list string) ([]string, error) {
	// Bounded before it is split: the whole list cannot be longer than its
	// longest allowed form.
	if limit := MaxRequireGlobs * (MaxRequireGlobBytes + 1); len(list) > limit {
		return nil, fmt.Errorf("the list is %d bytes; at most %d globs of at most %d bytes each are allowed", len(list), MaxRequireGlobs, MaxRequireGlobBytes)
	}
	globs, err := ParseGlobList(list)
	if err != nil {
		return nil, err
	}
	if len(globs) > MaxRequireGlobs {
		return nil, fmt.Errorf("%d globs; at most %d are allowed", len(globs), MaxRequireGlobs)
	}
	for _, g := range globs {
		if len(g) > MaxRequireGlobBytes {
			return nil, fmt.Errorf("glob %q is %d bytes; at most %d are allowed", truncateGlob(g), len(g), MaxRequireGlobBytes)
		}
		if err := checkRequireSegments(g); err != nil {
			return nil, err
		}
	}
	return globs, nil
}

// checkRequireSegments refuses a glob that no manifest path can match:
// manifest paths are clean and name files.
func checkRequireSegments(g string) error {
	for _, seg := range strings.Split(g, "/") {
		switch seg {
		case "..":
			return fmt.Errorf("glob %q must not contain '..': it matches paths under the job's prefix only", g)
		case ".", "":
			return fmt.Errorf("glob %q must be a clean path (no '.' or empty segment, no trailing '/'): it is matched against the manifest's file paths", g)
		}
	}
	return nil
}

// truncateGlob keeps a refused glob short in the message that quotes it.
func truncateGlob(g string) string {
	if len(g) <= 64 {
		return g
	}
	return g[:61] + "..."
}
