package ownwrites

import (
	"crypto/sha256"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// secretVerifiedFor is how long a token Secret this process last read or
// wrote stands, for a binding that waits for its first pods, without being
// read again. Token Secrets are not cached (caching them would need
// list/watch on every Secret of the cluster), so every recheck of such a
// binding (every 15 s, for FailedCreate Events) read its Secret from the
// API server, a GET per waiting binding that a burst of admitted jobs
// without pods paid every 15 s. No pod mounts the Secret meanwhile; the
// reconcile its first pod brings reads it again, and so does the first
// recheck after this window: a Secret deleted meanwhile is reissued then.
const secretVerifiedFor = 2 * time.Minute

// secretMark is what is remembered of a verified Secret: no copy of it,
// only what it held.
type secretMark struct {
	tokenSHA256 string
	ca          [sha256.Size]byte
	at          time.Time
}

// SecretVerified records that TrainJob key's token Secret holds the token
// of hash tokenSHA256 and the CA bundle ca, as read or written now.
func (o *Tracker) SecretVerified(key types.NamespacedName, tokenSHA256 string, ca []byte, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verified == nil {
		o.verified = map[types.NamespacedName]secretMark{}
	}
	o.prune(now)
	o.verified[key] = secretMark{tokenSHA256: tokenSHA256, ca: sha256.Sum256(ca), at: now}
}

// SecretStands reports whether TrainJob key's token Secret was verified
// less than secretVerifiedFor ago holding the token of hash tokenSHA256 and
// the CA bundle ca (a CA rotated since is written at once).
func (o *Tracker) SecretStands(key types.NamespacedName, tokenSHA256 string, ca []byte, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	m, ok := o.verified[key]
	return ok && now.Sub(m.at) < secretVerifiedFor && m.tokenSHA256 == tokenSHA256 && m.ca == sha256.Sum256(ca)
}
