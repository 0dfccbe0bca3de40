package store

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// pendingInfix is what a pending key adds between the job id and the path.
const pendingInfix = upload.PendingDir

// PendingKey is where a PUT to key is stored while an object with a different
// ETag already holds key. key must be a valid client key.
func PendingKey(key string) string {
	job, rest, _ := strings.Cut(key, "/")
	return job + "/" + pendingInfix + rest
}

// pendingPrefix is the prefix of every pending key of a job.
func pendingPrefix(jobID string) string { return jobID + "/" + pendingInfix }

// checkKey checks a client's object key against the contract: <job-id>/<path>
// with forward slashes, no empty, "." or ".." segment, valid UTF-8 without
// NUL, at most upload.MaxKeyLength bytes, and not under <job-id>/.tether/. It returns
// the job id (the first segment) and the path.
func checkKey(key string) (jobID, path string, e *apiError) {
	switch {
	case key == "":
		return "", "", &apiError{http.StatusBadRequest, "InvalidRequest",
			"the request names no object key: use /" + upload.Bucket + "/<job-id>/<path>"}
	case len(key) > upload.MaxKeyLength:
		return "", "", &apiError{http.StatusBadRequest, "KeyTooLongError",
			fmt.Sprintf("the key is %d bytes long; keys are at most %d bytes (S3's 1024 minus room for %q): shorten the artifact's path", len(key), upload.MaxKeyLength, pendingInfix)}
	case !utf8.ValidString(key):
		return "", "", &apiError{http.StatusBadRequest, "InvalidArgument",
			"the key is not valid UTF-8: artifact paths must be UTF-8 file names"}
	case strings.IndexByte(key, 0) >= 0:
		return "", "", &apiError{http.StatusBadRequest, "InvalidArgument",
			"the key contains a NUL byte"}
	}
	if msg := checkSegments(key); msg != "" {
		return "", "", &apiError{http.StatusBadRequest, "InvalidArgument", msg}
	}
	jobID, path, ok := strings.Cut(key, "/")
	if !ok {
		return "", "", &apiError{http.StatusBadRequest, "InvalidArgument",
			"the key has no path after the job id: use <job-id>/<path relative to the artifact directory>"}
	}
	if first, _, _ := strings.Cut(path, "/"); first == upload.ReservedDir {
		return "", "", &apiError{http.StatusForbidden, "AccessDenied",
			"keys under <job-id>/" + upload.ReservedDir + "/ are reserved for the server: rename the artifact directory's " + upload.ReservedDir + " entry"}
	}
	return jobID, path, nil
}

// checkSegments returns why key is not a clean relative path, or "".
func checkSegments(key string) string {
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return "the key has an empty segment (a leading, trailing or doubled \"/\"): send the file's exact relative path"
		case ".", "..":
			return "the key has a \"" + seg + "\" segment: send the file's path relative to the artifact directory without \".\" or \"..\""
		}
	}
	return ""
}

// tokenFromHeader returns the request's token: exactly one upload.TokenHeader
// value of 64 lowercase hex characters.
func tokenFromHeader(h http.Header) (binding.Token, *apiError) {
	vs := h.Values(upload.TokenHeader)
	if len(vs) == 0 {
		return "", &apiError{http.StatusUnauthorized, "AccessDenied",
			"the request has no " + upload.TokenHeader + " header: send the job's token (the token Secret's \"token\" key) in it"}
	}
	token, err := binding.ParseToken(vs[0])
	if len(vs) > 1 || err != nil {
		return "", &apiError{http.StatusUnauthorized, "AccessDenied",
			"the " + upload.TokenHeader + " header must hold exactly one 64-character lowercase hex token"}
	}
	return token, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
