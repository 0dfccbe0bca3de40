package objects

import "sync"

// KeyLocks serializes requests on one key within this process: the
// endpoint's PUT holds its key's lock from the HEADs that choose where the
// body goes until the object is verified (or removed), and promotion holds
// it while it moves a pending object over its key, so neither sees the
// other half done. The zero value is ready; share it by pointer.
type KeyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// Lock takes key's lock and returns what releases it.
func (l *KeyLocks) Lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*keyLock)
	}
	k := l.m[key]
	if k == nil {
		k = &keyLock{}
		l.m[key] = k
	}
	k.refs++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}
