package endpoint

import (
	"net/http"
	"time"
)

// ReadyWait is how long a request waits for Handler.Ready.
const ReadyWait = 5 * time.Second

// reasonStoreNotProbed is the refusal of a request that came before the
// store could be used (Handler.Ready).
const reasonStoreNotProbed = "store_not_probed"

// ready reports whether the backend may be used, after waiting at most
// ReadyWait (or until the request ends): a replica that starts serves its
// sessions at once, and its first uploads wait out the store's probe.
func (h *Handler) ready(r *http.Request) bool {
	if h.Ready == nil {
		return true
	}
	select {
	case <-h.Ready:
		return true
	default:
	}
	t := time.NewTimer(ReadyWait)
	defer t.Stop()
	select {
	case <-h.Ready:
		return true
	case <-r.Context().Done():
		return false
	case <-t.C:
		return false
	}
}
