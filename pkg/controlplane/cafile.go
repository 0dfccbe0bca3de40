package controlplane

import (
	"os"
	"sync"
)

// lastGoodFile reads path on every call (so a rotated CA is picked up) but
// answers with the last content it read when the file is briefly missing or
// empty (a Secret volume or cert-manager swapping it): reconciles, which
// also record trainer exits, must not stall on a transient read failure.
func lastGoodFile(path string) func() ([]byte, error) {
	var mu sync.Mutex
	var last []byte
	return func() ([]byte, error) {
		b, err := os.ReadFile(path)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && len(b) > 0 {
			last = b
			return b, nil
		}
		if last != nil {
			return last, nil
		}
		return b, err
	}
}
