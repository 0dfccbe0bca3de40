package checkpoint

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxPatternLength bounds a pattern's text.
const MaxPatternLength = 256

const (
	stepPlaceholder  = "{step}"
	epochPlaceholder = "{epoch}"
)

// Pattern is what a checkpoint's path looks like. A pattern ending in "/"
// is a directory checkpoint (every file under it belongs to it); any other
// is a one-file checkpoint. Build one with ParsePattern or take a preset.
type Pattern struct {
	text string
	dir  bool
	// comps are the pattern's '/'-separated components; exactly one holds
	// the step.
	comps []component
	// required are file names a directory checkpoint must hold directly to
	// be complete (a trainer's last-written file).
	required []string
}

// component is one part of a pattern between slashes, as a glob where '*'
// matches any run of bytes ({epoch} becomes '*'). The component that holds
// {step} keeps the globs before and after it.
type component struct {
	glob          string
	before, after string
	step          bool
}

// PatternError says why ParsePattern refused a pattern.
type PatternError struct {
	Pattern string
	Problem string
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("checkpoint pattern %q: %s; want a pattern such as %q (a directory per checkpoint), %q (a file per checkpoint) or a preset name (%s)",
		e.Pattern, e.Problem, "checkpoint-{step}/", "epoch={epoch}-step={step}.ckpt", strings.Join(PresetNames(), ", "))
}

// ParsePattern parses a pattern: '/'-separated components relative to the
// artifact directory, with exactly one {step} (the step: a run of digits),
// any number of {epoch} and '*' (anything without '/'), and a trailing "/"
// for a directory checkpoint, or the name of a preset (PresetNames). It
// refuses an empty, absolute or over-long pattern, "." and ".."
// components, and placeholders it does not know.
func ParsePattern(s string) (Pattern, error) {
	if p, ok := presets[s]; ok {
		return p, nil
	}
	return parsePattern(s)
}

// parsePattern is ParsePattern without the presets' names.
func parsePattern(s string) (Pattern, error) {
	fail := func(format string, a ...any) (Pattern, error) {
		return Pattern{}, &PatternError{Pattern: s, Problem: fmt.Sprintf(format, a...)}
	}
	switch n := strings.Count(s, stepPlaceholder); {
	case s == "":
		return fail("empty")
	case len(s) > MaxPatternLength:
		return fail("%d bytes, at most %d", len(s), MaxPatternLength)
	case strings.HasPrefix(s, "/"):
		return fail("absolute; a pattern is relative to the artifact directory")
	case strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return fail("holds a control character")
	case strings.Contains(s, "**"):
		return fail(`"**": a pattern matches at any depth already; use one "*" within a name`)
	case n != 1:
		return fail("%d %s placeholders, want exactly one", n, stepPlaceholder)
	}
	p := Pattern{text: s, dir: strings.HasSuffix(s, "/")}
	for _, part := range strings.Split(strings.TrimSuffix(s, "/"), "/") {
		switch part {
		case "":
			return fail(`an empty component ("//")`)
		case ".", "..":
			return fail("a %q component", part)
		}
		c, err := parseComponent(part)
		if err != "" {
			return fail("%s", err)
		}
		p.comps = append(p.comps, c)
	}
	return p, nil
}

// parseComponent turns one component into globs; the error is "" or what is
// wrong with it.
func parseComponent(part string) (component, string) {
	globOf := func(s string) (string, string) {
		g := strings.ReplaceAll(s, epochPlaceholder, "*")
		if strings.ContainsAny(g, "{}") {
			return "", fmt.Sprintf("%q: an unknown placeholder or a brace; only %s and %s are placeholders", part, stepPlaceholder, epochPlaceholder)
		}
		for strings.Contains(g, "**") {
			g = strings.ReplaceAll(g, "**", "*") // "{epoch}*" is one wildcard
		}
		return g, ""
	}
	before, after, step := strings.Cut(part, stepPlaceholder)
	if !step {
		g, err := globOf(part)
		return component{glob: g}, err
	}
	b, err := globOf(before)
	if err != "" {
		return component{}, err
	}
	a, err := globOf(after)
	return component{before: b, after: a, step: true}, err
}

// String is the pattern's text (a preset's pattern, not its name).
func (p Pattern) String() string { return p.text }

// Dir reports whether the pattern names directory checkpoints.
func (p Pattern) Dir() bool { return p.dir }

// Required returns the names of the files a checkpoint of this pattern
// must hold directly to be complete (nil: none).
func (p Pattern) Required() []string { return append([]string(nil), p.required...) }

// Match returns the checkpoint a file belongs to: for a directory pattern
// the innermost directory above path that matches (its path ends in "/"),
// for a file pattern path itself; and the step its name carries. path is
// relative to the artifact directory, '/'-separated.
func (p Pattern) Match(path string) (checkpoint string, step int64, ok bool) {
	return p.match(path, splitPath(path))
}

// splitPath splits a relative path into its components; nil when it has an
// empty one (leading, trailing or doubled '/').
func splitPath(path string) []string {
	parts := strings.Split(path, "/")
	for _, c := range parts {
		if c == "" {
			return nil
		}
	}
	return parts
}

// match is Match on path's components (splitPath).
func (p Pattern) match(path string, parts []string) (string, int64, bool) {
	k := len(p.comps)
	if k == 0 || len(parts) == 0 {
		return "", 0, false
	}
	if !p.dir {
		step, ok := p.matchTail(parts)
		return path, step, ok
	}
	// end counts the components of the directory tried, innermost first:
	// the file itself (the last component) is never a directory checkpoint.
	for end := len(parts) - 1; end >= k; end-- {
		if step, ok := p.matchTail(parts[:end]); ok {
			n := end - 1 // the separators within the directory
			for _, c := range parts[:end] {
				n += len(c)
			}
			return path[:n] + "/", step, true
		}
	}
	return "", 0, false
}

// matchTail matches the pattern against the last components of parts.
func (p Pattern) matchTail(parts []string) (step int64, ok bool) {
	k := len(p.comps)
	if len(parts) < k {
		return 0, false
	}
	tail := parts[len(parts)-k:]
	found := false
	for i, c := range p.comps {
		if !c.step {
			if !globMatch(c.glob, tail[i]) {
				return 0, false
			}
			continue
		}
		if step, found = matchStep(c, tail[i]); !found {
			return 0, false
		}
	}
	return step, found
}

// matchStep matches a component holding {step} against name: the step is
// a whole run of digits (no digit right before or after it), the last such
// run for which the globs before and after match.
func matchStep(c component, name string) (int64, bool) {
	j := len(name)
	for j > 0 {
		for j > 0 && !isDigit(name[j-1]) {
			j--
		}
		i := j
		for i > 0 && isDigit(name[i-1]) {
			i--
		}
		if i == j {
			break
		}
		if globMatch(c.before, name[:i]) && globMatch(c.after, name[j:]) {
			if step, err := strconv.ParseInt(name[i:j], 10, 64); err == nil {
				return step, true
			}
		}
		j = i
	}
	return 0, false
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// globMatch matches name against a glob whose only special byte is '*'
// (any run of bytes): a linear scan that backtracks to the last '*' only.
func globMatch(glob, name string) bool {
	g, n := 0, 0
	star, starN := -1, 0
	for n < len(name) {
		switch {
		case g < len(glob) && glob[g] == '*':
			star, starN = g, n
			g++
		case g < len(glob) && glob[g] == name[n]:
			g++
			n++
		case star >= 0:
			starN++
			g, n = star+1, starN
		default:
			return false
		}
	}
	for g < len(glob) && glob[g] == '*' {
		g++
	}
	return g == len(glob)
}
