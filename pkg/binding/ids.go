package binding

import "regexp"

// idPattern is what a job or worker id may look like: it prefixes object keys
// and becomes a metric label, so it stays a short, path-safe token (no '/',
// '\', NUL, '.' or '..', nothing that is not ASCII).
var idPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// IDRule says in words what ValidID accepts.
const IDRule = "1-63 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit"

// ValidID reports whether s is a valid job or worker id: the one rule the
// TrainJob webhook, the sidecar's uploader and its manifest apply.
func ValidID(s string) bool { return idPattern.MatchString(s) }
