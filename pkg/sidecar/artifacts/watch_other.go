//go:build !linux

package artifacts

// watcher is inotify's; elsewhere file events are unavailable and the
// settle rule alone decides.
type watcher struct{}

func newWatcher(*Scanner, func(int, string, uint32) (int, error)) (*watcher, error) {
	return nil, &eventsUnavailableError{reason: "inotify is Linux-only"}
}

func (w *watcher) watches() int                                     { return 0 }
func (w *watcher) Close() error                                     { return nil }
func (w *watcher) Ready() <-chan struct{}                           { return nil }
func (w *watcher) Take() (paths []string, overflow bool, err error) { return nil, false, nil }

func (w *watcher) addTree(string, bool) error { return nil }
