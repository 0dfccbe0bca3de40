package binding

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// idPattern is what a job or worker id may look like: it prefixes object keys
// and becomes a metric label, so it stays a short, path-safe token (no '/',
// '\', NUL, '.' or '..', nothing that is not ASCII).
var idPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// IDRule says in words what ValidID accepts.
const IDRule = "1-63 lowercase letters, digits, '.', '_' or '-', starting and ending with a letter or digit"

// ValidID reports whether s is a valid job or worker id: the one rule the
// TrainJob webhook, the sidecar's uploader and its manifest apply.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// A job id is a prefix in the one bucket every tenant shares, and the
// objects under it outlive the namespace that wrote them, so an id belongs
// to one namespace for good: to that namespace, not to its name, which a
// namespace created later may take. An id of the form
// <namespace>_<8 hex digits><16 hex digits> is scoped: the 8 digits are the
// namespace's tag (NamespaceTag, from its UID), the 16 a random nonce. Only
// TrainJobs of the namespace it names, with that tag, may hold it (the
// TrainJob webhook refuses it anywhere else, and so does the controller),
// so it is apart from every other tenant's, and from a later namespace of
// the same name, by construction, and needs no cluster-wide claim. Tether
// generates scoped ids; any other id (chosen by the user, or generated for
// a namespace too long for a scoped one) is claimed cluster-wide by the
// first TrainJob that binds it, the claim naming the namespace's UID.
//
// Releases before the tag generated <namespace>_<16 hex digits>: such an id
// still names its namespace (the bindings that hold it keep working), but
// carries no tag to tell that namespace from a later one of the same name,
// so no new TrainJob may bind it (UntaggedScopedJobID). A namespace is a DNS
// label (no '_'), so the scope is the part before the '_'.
var scopedJobIDPattern = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)_((?:[0-9a-f]{8})?)[0-9a-f]{16}$`)

// ScopedIDRule says in words which ids are scoped, for the refusals of one
// in another namespace.
const ScopedIDRule = "an id of the form <namespace>_<hex digits> belongs to the namespace it names, and only while that namespace exists"

// ScopedNonceLen is the length of a scoped job id's nonce (lowercase hex).
const ScopedNonceLen = 16

// NamespaceTagLen is the length of a scoped job id's namespace tag
// (lowercase hex): 32 bits of a hash of the namespace's UID, which the API
// server chooses at random, so a namespace made again under the same name
// matches an earlier one's tag by chance once in about four billion.
const NamespaceTagLen = 8

// NamespaceTag returns the tag scoped job ids carry for the namespace whose
// UID is uid.
func NamespaceTag(uid string) string {
	h := sha256.Sum256([]byte("tether.dev/namespace-uid\x00" + uid))
	return hex.EncodeToString(h[:])[:NamespaceTagLen]
}

// ScopedJobID returns the job id scoped to namespace ns, whose UID is nsUID,
// with nonce (16 lowercase hex digits), or "" when ns is too long for one:
// an id holds at most 63 characters, so namespaces of up to 38 have scoped
// ids.
func ScopedJobID(ns, nsUID, nonce string) string {
	id := ns + "_" + NamespaceTag(nsUID) + nonce
	if JobIDScope(id) != ns {
		return ""
	}
	return id
}

// JobIDScope returns the namespace a scoped job id belongs to (of either
// form), or "" for any other id (one that is claimed cluster-wide).
func JobIDScope(id string) string {
	if !ValidID(id) {
		return ""
	}
	m := scopedJobIDPattern.FindStringSubmatch(id)
	if m == nil {
		return ""
	}
	return m[1]
}

// ScopedJobIDTag returns a scoped job id's namespace tag, or "" for an id
// of the untagged form of earlier releases and for an id that is not
// scoped.
func ScopedJobIDTag(id string) string {
	if !ValidID(id) {
		return ""
	}
	m := scopedJobIDPattern.FindStringSubmatch(id)
	if m == nil {
		return ""
	}
	return m[3]
}

// ScopedJobIDBelongs reports whether scoped job id id belongs to namespace
// ns whose UID is nsUID: it names ns and carries ns's tag.
func ScopedJobIDBelongs(id, ns, nsUID string) bool {
	tag := ScopedJobIDTag(id)
	return JobIDScope(id) == ns && tag != "" && tag == NamespaceTag(nsUID)
}

// ScopedIDOrigin says why a scoped job id that names a namespace is not
// that namespace's now (ScopedJobIDBelongs is false for it).
func ScopedIDOrigin(id string) string {
	if ScopedJobIDTag(id) == "" {
		return "it has the untagged form of earlier releases, which does not say which namespace of that name it was made for, so it binds no new TrainJob"
	}
	return "it was made for an earlier namespace of the same name, since deleted; its artifacts stay in the bucket as that namespace's and are never handed to a later one"
}
