package store

import "time"

// AccessRecord is one request to the artifact endpoint as the store's
// access log keeps it (Options.OnAccess): who asked (the binding its token
// belongs to, the pod it claims), for what (the key, the rank whose keys it
// is), and what came of it. It never holds the token.
type AccessRecord struct {
	RequestID string
	// Method is the HTTP method; Op says what it was: "put", "head",
	// "authorize" or "commit" (a direct upload's two steps).
	Method, Op string
	// Key is the object's key (<job-id>/<path>), as the request named it.
	Key string
	// Binding (namespace/name) and JobID are the token's binding, once the
	// token was recognized ("" when it was not).
	Binding, JobID string
	// Rank is the node whose keys Key is (-1: not known, e.g. a bad key).
	Rank int
	// Pod is the pod UID the request claims (names.HeaderArtifactPodUID).
	Pod string
	// Status is the answer's status; Code the S3 error code of a refusal
	// ("" on success).
	Status int
	Code   string
	// BodyBytes is how much of the request body was read.
	BodyBytes int64
	Duration  time.Duration
}

// Outcome is "ok" or the refusal's code, for a log line.
func (a AccessRecord) Outcome() string {
	if a.Code == "" {
		return "ok"
	}
	return a.Code
}

// LogsAccess reports whether the store keeps an access log: the endpoint
// then records each request (its status, the body bytes it read).
func (s *Store) LogsAccess() bool { return s.opts.OnAccess != nil }

// LogAccess adds a to the access log, if the store keeps one.
func (s *Store) LogAccess(a AccessRecord) {
	if s.opts.OnAccess != nil {
		s.opts.OnAccess(a)
	}
}
