package controller

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
)

var tokenPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// NewToken returns a 256-bit random token, hex encoded.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes for a token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// HashToken is the SHA-256 of a token, lowercase hex: what a WorkerBinding keeps.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// validToken reports whether a Secret's token has the shape NewToken makes.
func validToken(b []byte) bool { return tokenPattern.Match(b) }
