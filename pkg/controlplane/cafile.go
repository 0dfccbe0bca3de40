package controlplane

import (
	"os"
	"sync"
	"time"
)

// fileRecheck is how long lastGoodFile answers with what it read before it
// reads the file again: a rotated CA or key is picked up within it, and a
// burst of reconciles or admissions does not read the file each time
// (test/performance/controller: the CA's reads were a fifth of the bind's reconcile
// CPU).
const fileRecheck = time.Second

// lastGoodFile reads path at most once per fileRecheck (so a rotated CA is
// picked up) and answers with the last content it read when the file is
// briefly missing or empty (a Secret volume or cert-manager swapping it):
// reconciles, which also record trainer exits, must not stall on a
// transient read failure. Callers must not change what it returns.
func lastGoodFile(path string) func() ([]byte, error) {
	return lastGoodFileAt(path, time.Now)
}

func lastGoodFileAt(path string, now func() time.Time) func() ([]byte, error) {
	var mu sync.Mutex
	var last []byte
	var readAt time.Time
	return func() ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		t := now()
		if last != nil && t.Sub(readAt) < fileRecheck {
			return last, nil
		}
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 {
			last, readAt = b, t
			return b, nil
		}
		if last != nil {
			return last, nil
		}
		return b, err
	}
}
