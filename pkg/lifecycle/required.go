package lifecycle

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// A job may require outputs (spec.settings.require): globs that must each
// match a verified file of its final manifests. The check is made once,
// when every manifest is verified and the TrainJob is complete, on the
// manifests the completion gate verified (by their recorded SHA-256),
// before anything is promoted: a checkpoint that an earlier manifest
// listed does not count, and a job that fails the check never puts its
// uploads over the final keys.

// ListedPaths is what the bound nodes' verified manifests list, read from
// the store when Outcome.Want.ListedPaths asked.
type ListedPaths struct {
	// Paths are every listed file's path relative to the job's prefix
	// (nodes/<r>/... for node r > 0).
	Paths []string
	// Err says why the manifests could not be read ("": they were).
	Err string
	// Changed is a verified manifest no longer stored as its verdict
	// recorded it: its verdict is taken back (ArtifactsNotAsListed).
	Changed *ChangedManifest
}

// ChangedManifest is node Rank's verified manifest, or the file Path it
// lists (relative to the node's prefix), no longer stored as verified.
type ChangedManifest struct {
	Rank      int32
	Path, Why string
}

// listedPathsRetry is how soon a binding whose manifests could not be read
// for the check is looked at again.
const listedPathsRetry = 5 * time.Second

// Bounds of the RequiredOutputsMissing message, which its Warning Event
// carries too (an Event's note is at most 1 kB, with "binding Failed: "
// before it): the globs that matched nothing are named, up to
// maxNamedGlobs and as many as fit, each with up to maxClosestPaths
// verified paths, every glob and path cut to maxQuotedBytes.
const (
	maxNamedGlobs           = 8
	maxClosestPaths         = 3
	maxQuotedBytes          = 96
	maxRequiredMessageBytes = 1000
	// closestShortlist is how many paths, picked by file name, extension
	// and shared prefix, are ranked by edit distance too.
	closestShortlist = 16
	// editDistanceBytes bounds the strings an edit distance is taken of.
	editDistanceBytes = 256
)

// requireOutputs checks a promoting binding's required outputs, asking for
// the verified manifests' paths when it does not have them. It reports
// whether the artifacts may be promoted now, and when to look again when
// they may not.
func requireOutputs(wb *tetherv1.WorkerBinding, st *tetherv1.WorkerBindingStatus, o Observation, out *Outcome) (bool, time.Duration) {
	if !Promoting(st) {
		return false, 0
	}
	require := Settings(&wb.Spec).Require
	if len(require) == 0 {
		return true, 0
	}
	lp := o.ListedPaths
	switch {
	case lp == nil:
		out.Want.ListedPaths = VerifiedManifests(st)
		return false, listedPathsRetry
	case lp.Changed != nil:
		ArtifactsNotAsListed(st, lp.Changed.Rank, lp.Changed.Path, lp.Changed.Why)
		return false, listedPathsRetry
	case lp.Err != "":
		set(st, tetherv1.PhaseFinishing, tetherv1.ReasonPromotingArtifacts,
			Truncate("every artifact verified, but the verified manifests could not be read to check the required outputs ("+
				names.RequireAnnotation+"; retrying): "+lp.Err, MaxErrorBytes))
		return false, listedPathsRetry
	}
	return RequiredOutputs(st, require, lp.Paths), 0
}

// RequiredOutputs checks the required globs against paths, the final
// verified manifests' paths relative to the job's prefix. It reports
// whether every glob matched a path; when one did not, a binding not yet
// final fails RequiredOutputsMissing, its message naming each such glob and
// the verified paths closest to it.
func RequiredOutputs(st *tetherv1.WorkerBindingStatus, require, paths []string) bool {
	missing := UnmatchedGlobs(require, paths)
	if len(missing) == 0 {
		return true
	}
	finish(st, tetherv1.PhaseFailed, tetherv1.ReasonRequiredOutputsMissing, requiredOutputsMessage(missing, paths))
	return false
}

// UnmatchedGlobs are the globs of require that match none of paths, in
// require's order.
func UnmatchedGlobs(require, paths []string) []string {
	var missing []string
	for _, g := range require {
		if !slices.ContainsFunc(paths, func(p string) bool { return doublestar.MatchUnvalidated(g, p) }) {
			missing = append(missing, g)
		}
	}
	return missing
}

// requiredOutputsMessage names each glob that matched nothing with the
// verified paths closest to it, as many as fit in
// maxRequiredMessageBytes, and counts the others.
func requiredOutputsMessage(missing, paths []string) string {
	msg := fmt.Sprintf("the final verified manifests (%d files) lack required outputs (%s): ", len(paths), names.RequireAnnotation)
	for i, g := range missing {
		part := fmt.Sprintf("%q matched no verified file", Truncate(g, maxQuotedBytes))
		if near := ClosestPaths(g, paths, maxClosestPaths); len(near) > 0 {
			for j := range near {
				near[j] = Truncate(near[j], maxQuotedBytes)
			}
			part += " (closest verified: " + strings.Join(near, ", ") + ")"
		}
		if i > 0 {
			part = "; " + part
		}
		more := ""
		if rest := len(missing) - i - 1; rest > 0 {
			more = fmt.Sprintf("; and %d more globs that matched nothing", rest)
		}
		if i == maxNamedGlobs || len(msg)+len(part)+len(more) > maxRequiredMessageBytes {
			if i == 0 {
				// One glob and its paths are always named, cut to fit.
				return Truncate(msg+part, maxRequiredMessageBytes-len(more)) + more
			}
			return msg + fmt.Sprintf("; and %d more globs that matched nothing", len(missing)-i)
		}
		msg += part
	}
	return msg
}

// ClosestPaths are up to k of paths that look most like what glob meant:
// first those whose file name the glob's last segment matches (the file
// in another directory), then those of the glob's extension, then those
// sharing the longest prefix with the glob's literal start, then the
// nearest by edit distance.
func ClosestPaths(glob string, paths []string, k int) []string {
	type candidate struct {
		path              string
		sameBase, sameExt bool
		prefix, distance  int
	}
	lit, ext, base := literalPrefix(glob), literalExt(glob), path.Base(glob)
	// closer orders by everything but the edit distance, which is taken of
	// a shortlist only (a manifest may list many thousands of files).
	closer := func(a, b candidate) int {
		switch {
		case a.sameBase != b.sameBase:
			return boolOrder(a.sameBase)
		case a.sameExt != b.sameExt:
			return boolOrder(a.sameExt)
		case a.prefix != b.prefix:
			return b.prefix - a.prefix
		}
		return 0
	}
	var short []candidate
	for _, p := range paths {
		c := candidate{path: p, sameBase: doublestar.MatchUnvalidated(base, path.Base(p)), sameExt: ext != "" && path.Ext(p) == ext,
			prefix: commonPrefix(lit, p)}
		i := len(short)
		for i > 0 && (closer(c, short[i-1]) < 0 || closer(c, short[i-1]) == 0 && len(c.path) < len(short[i-1].path)) {
			i--
		}
		if i < closestShortlist {
			short = slices.Insert(short, i, c)[:min(len(short)+1, closestShortlist)]
		}
	}
	for i := range short {
		short[i].distance = editDistance(glob, short[i].path)
	}
	slices.SortStableFunc(short, func(a, b candidate) int {
		if c := closer(a, b); c != 0 {
			return c
		}
		if a.distance != b.distance {
			return a.distance - b.distance
		}
		return strings.Compare(a.path, b.path)
	})
	out := make([]string, 0, k)
	for _, c := range short[:min(len(short), k)] {
		out = append(out, c.path)
	}
	return out
}

// boolOrder orders true before false, for a that differs from its peer.
func boolOrder(a bool) int {
	if a {
		return -1
	}
	return 1
}

// literalPrefix is glob up to its first special character.
func literalPrefix(glob string) string {
	if i := strings.IndexAny(glob, `*?[{\`); i >= 0 {
		return glob[:i]
	}
	return glob
}

// literalExt is the extension glob's last segment ends in, when it is
// literal (".safetensors" of "model/*.safetensors"), else "".
func literalExt(glob string) string {
	ext := path.Ext(glob)
	if strings.ContainsAny(ext, `*?[]{}\`) {
		return ""
	}
	return ext
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// editDistance is the Levenshtein distance of a and b, by bytes, each cut
// to editDistanceBytes.
func editDistance(a, b string) int {
	a, b = a[:min(len(a), editDistanceBytes)], b[:min(len(b), editDistanceBytes)]
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
