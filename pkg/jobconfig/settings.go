package jobconfig

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/distribution/reference"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
)

// Defaults for settings a TrainJob does not set.
const (
	DefaultArtifactPath      = "/workspace/artifacts"
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultTrainerContainer  = "node"

	MinHeartbeatInterval = time.Second
	MaxHeartbeatInterval = 5 * time.Minute

	// A stall window shorter than a minute would call every slow
	// evaluation pass a stall; one past a week never fires in a job's life.
	MinStallAfter = time.Minute
	MaxStallAfter = 7 * 24 * time.Hour
)

// Settings are a bound job's per-job settings, parsed and defaulted.
type Settings struct {
	ArtifactPath      string
	Include           []string
	Exclude           []string
	HeartbeatInterval time.Duration
	TrainerContainer  string
	// SidecarImage is empty unless the TrainJob overrides the control plane's image.
	SidecarImage string
	// Nodes is NodesAll or NodesPrimary.
	Nodes string
	// TrainerStatus is TrainerStatusAuto or TrainerStatusOff.
	TrainerStatus string
	// StallAfter is the stall window the TrainJob sets (0: the default,
	// derived from the steps seen).
	StallAfter time.Duration
	// SidecarRequests and SidecarLimits are nil unless the TrainJob
	// overrides the control plane's (per resource; see MergeResources).
	// Values are validated quantities (ParseResourceList).
	SidecarRequests, SidecarLimits map[string]string
	// Require are the job's required outputs (names.RequireAnnotation):
	// globs on the final manifests' paths, relative to the job's prefix;
	// nil when the TrainJob requires none.
	Require []string
}

// InvalidAnnotationError says which annotation is wrong, what it holds and what
// a good value looks like; admission denials quote it verbatim.
type InvalidAnnotationError struct {
	Key, Value, Problem, Example string
}

func (e *InvalidAnnotationError) Error() string {
	return fmt.Sprintf("annotation %s=%q is invalid: %s (example: %s: %q)", e.Key, e.Value, e.Problem, e.Key, e.Example)
}

// dnsLabel is the shape of a container name.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ValidateID checks a job or worker id found under key.
func ValidateID(key, value string) error {
	if !binding.ValidID(value) {
		return &InvalidAnnotationError{Key: key, Value: value,
			Problem: "must be " + binding.IDRule,
			Example: "llama-finetune-0042"}
	}
	return nil
}

// Parse reads and validates the settings annotations. It reports every invalid
// annotation, not just the first, so one round trip fixes them all: the error
// joins one *InvalidAnnotationError per invalid annotation, one per line.
func Parse(annotations map[string]string) (Settings, error) {
	s, errs := parse(annotations)
	return s, errors.Join(errs...)
}

// ValidateUpdate validates the annotations of an object being updated from one
// whose annotations were old. Like Parse it reports every invalid annotation,
// but only among those the update adds or whose value it changes: a value
// already stored is not judged again, so an object that carries an invalid one
// (e.g. stored before a stricter release) can still be updated, by Kueue or to
// remove a finalizer. Whoever uses the settings still calls Parse and refuses
// them.
func ValidateUpdate(annotations, old map[string]string) error {
	_, errs := parse(annotations)
	changed := errs[:0]
	for _, err := range errs {
		if iae, ok := err.(*InvalidAnnotationError); ok {
			if prev, had := old[iae.Key]; had && prev == iae.Value {
				continue
			}
		}
		changed = append(changed, err)
	}
	return errors.Join(changed...)
}

// parse is Parse with the errors not yet joined; each is an *InvalidAnnotationError.
func parse(annotations map[string]string) (Settings, []error) {
	s := Settings{
		ArtifactPath:      DefaultArtifactPath,
		HeartbeatInterval: DefaultHeartbeatInterval,
		TrainerContainer:  DefaultTrainerContainer,
		Nodes:             NodesAll,
		TrainerStatus:     TrainerStatusAuto,
	}
	var errs []error
	if v, ok := annotations[names.TrainerStatusAnnotation]; ok {
		if v != TrainerStatusAuto && v != TrainerStatusOff {
			errs = append(errs, &InvalidAnnotationError{Key: names.TrainerStatusAnnotation, Value: v,
				Problem: "must be " + TrainerStatusAuto + " (Tether writes TrainJob.status.trainerStatus unless the trainer reports it) or " +
					TrainerStatusOff + " (never)", Example: TrainerStatusOff})
		} else {
			s.TrainerStatus = v
		}
	}
	if v, ok := annotations[names.NodesAnnotation]; ok {
		if v != NodesAll && v != NodesPrimary {
			errs = append(errs, &InvalidAnnotationError{Key: names.NodesAnnotation, Value: v,
				Problem: "must be " + NodesAll + " (every node is bound) or " + NodesPrimary + " (node rank 0 only)", Example: NodesPrimary})
		} else {
			s.Nodes = v
		}
	}
	if v, ok := annotations[names.ArtifactPathAnnotation]; ok {
		if err := validateArtifactPath(v); err != nil {
			errs = append(errs, err)
		} else {
			s.ArtifactPath = v
		}
	}
	var err error
	if s.Include, err = parseGlobs(names.IncludeAnnotation, annotations); err != nil {
		errs = append(errs, err)
	}
	if s.Exclude, err = parseGlobs(names.ExcludeAnnotation, annotations); err != nil {
		errs = append(errs, err)
	}
	if s.Require, err = parseRequire(annotations); err != nil {
		errs = append(errs, err)
	}
	if v, ok := annotations[names.HeartbeatIntervalAnnotation]; ok {
		if d, err := parseHeartbeatInterval(v); err != nil {
			errs = append(errs, err)
		} else {
			s.HeartbeatInterval = d
		}
	}
	if v, ok := annotations[names.StallAfterAnnotation]; ok {
		if d, err := parseStallAfter(v); err != nil {
			errs = append(errs, err)
		} else {
			s.StallAfter = d
		}
	}
	if v, ok := annotations[names.TrainerContainerAnnotation]; ok {
		if !dnsLabel.MatchString(v) {
			errs = append(errs, &InvalidAnnotationError{Key: names.TrainerContainerAnnotation, Value: v,
				Problem: "must be a container name (a DNS label)", Example: "node"})
		} else {
			s.TrainerContainer = v
		}
	}
	if v, ok := annotations[names.SidecarImageAnnotation]; ok {
		if _, perr := reference.ParseNormalizedNamed(v); perr != nil {
			errs = append(errs, &InvalidAnnotationError{Key: names.SidecarImageAnnotation, Value: v,
				Problem: "not an image reference: " + perr.Error(), Example: "ghcr.io/tether-dev/tether-sidecar:v0.1.0"})
		} else {
			s.SidecarImage = v
		}
	}
	for _, r := range []struct {
		key     string
		into    *map[string]string
		example string
	}{{names.SidecarRequestsAnnotation, &s.SidecarRequests, "cpu=100m,memory=128Mi"}, {names.SidecarLimitsAnnotation, &s.SidecarLimits, "cpu=2,memory=256Mi"}} {
		if v, ok := annotations[r.key]; ok {
			list, perr := ParseResourceList(v)
			if perr != nil {
				errs = append(errs, &InvalidAnnotationError{Key: r.key, Value: v, Problem: perr.Error(), Example: r.example})
				continue
			}
			*r.into = list
		}
	}
	// A request over its limit is judged after the merge with the control
	// plane's defaults, by the pod webhook (mutate.MergeResources).
	for _, key := range []string{names.JobIDAnnotation, names.WorkerIDAnnotation} {
		if v, ok := annotations[key]; ok {
			if err := ValidateID(key, v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return s, errs
}

func parseHeartbeatInterval(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, &InvalidAnnotationError{Key: names.HeartbeatIntervalAnnotation, Value: v, Problem: "not a duration", Example: "10s"}
	case d < MinHeartbeatInterval || d > MaxHeartbeatInterval:
		return 0, &InvalidAnnotationError{Key: names.HeartbeatIntervalAnnotation, Value: v,
			Problem: fmt.Sprintf("must be between %s and %s", shortDuration(MinHeartbeatInterval), shortDuration(MaxHeartbeatInterval)),
			Example: "10s"}
	}
	return d, nil
}

func parseStallAfter(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, &InvalidAnnotationError{Key: names.StallAfterAnnotation, Value: v, Problem: "not a duration", Example: "45m"}
	case d < MinStallAfter || d > MaxStallAfter:
		return 0, &InvalidAnnotationError{Key: names.StallAfterAnnotation, Value: v,
			Problem: fmt.Sprintf("must be between %s and %s", shortDuration(MinStallAfter), shortDuration(MaxStallAfter)), Example: "45m"}
	}
	return d, nil
}

// reservedPrefix is where the sidecar keeps its own mounts; an artifact path
// there would collide with them.
const reservedPrefix = "/var/run/tether"

func validateArtifactPath(v string) error {
	bad := func(problem string) error {
		return &InvalidAnnotationError{Key: names.ArtifactPathAnnotation, Value: v, Problem: problem, Example: DefaultArtifactPath}
	}
	switch {
	case !strings.HasPrefix(v, "/"):
		return bad("must be an absolute path")
	case path.Clean(v) != v:
		return bad("must be a clean path (no '..', '.', '//' or trailing '/')")
	case v == "/":
		return bad("must not be the root directory")
	case len(v) > 1024:
		return bad("must be at most 1024 characters")
	case strings.ContainsAny(v, ":,\x00"):
		return bad("must not contain ':', ',' or NUL")
	case v == reservedPrefix || strings.HasPrefix(v, reservedPrefix+"/"):
		return bad("must not be under " + reservedPrefix + ", which the sidecar reserves")
	}
	return nil
}

func parseGlobs(key string, annotations map[string]string) ([]string, error) {
	v, ok := annotations[key]
	if !ok {
		return nil, nil
	}
	globs, err := ParseGlobList(v)
	if err != nil {
		return nil, &InvalidAnnotationError{Key: key, Value: v, Problem: err.Error(), Example: "checkpoints/**,*.safetensors"}
	}
	return globs, nil
}

// ParseGlobList splits a comma-separated glob list (SplitGlobs) and checks
// every glob: not empty, relative to the artifact path, well-formed. The
// include and exclude annotations and the sidecar's TETHER_INCLUDE and
// TETHER_EXCLUDE are all read with it.
func ParseGlobList(list string) ([]string, error) {
	globs := SplitGlobs(list)
	for _, g := range globs {
		switch {
		case g == "":
			return nil, errors.New("empty glob in the list")
		case strings.HasPrefix(g, "/"):
			return nil, fmt.Errorf("glob %q must be relative to the artifact path", g)
		case !doublestar.ValidatePattern(g):
			return nil, fmt.Errorf("glob %q is malformed", g)
		}
	}
	return globs, nil
}

// SplitGlobs splits a comma-separated list of doublestar globs, as found in the
// include and exclude annotations and in the sidecar's TETHER_INCLUDE and
// TETHER_EXCLUDE (which hold the validated globs joined with ","). It splits on
// the commas that separate globs only: not on a comma inside a brace
// alternation ({model,tokenizer}), inside a character class ([,;]) or escaped
// (\,). Each glob is trimmed of surrounding spaces.
//
// Unbalanced input is not split where it is unbalanced: an unclosed '{' or '['
// keeps the rest of the list in one glob, and a stray '}' stays in its glob,
// which doublestar.ValidatePattern then rejects as malformed.
func SplitGlobs(list string) []string {
	var globs []string
	start, depth := 0, 0
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '\\':
			i++ // the next byte is literal
		case '[':
			// A class ends at the first unescaped ']'.
			if i++; i < len(list) && (list[i] == '^' || list[i] == '!') {
				i++
			}
			for ; i < len(list) && list[i] != ']'; i++ {
				if list[i] == '\\' {
					i++
				}
			}
		case '{':
			depth++
		case '}':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				globs = append(globs, strings.TrimSpace(list[start:i]))
				start = i + 1
			}
		}
	}
	return append(globs, strings.TrimSpace(list[start:]))
}

// shortDuration writes d as a person would: 5m, not 5m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
