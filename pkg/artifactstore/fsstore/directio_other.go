//go:build !linux

package fsstore

import "os"

// Direct I/O is Linux's here: elsewhere every object goes through the page
// cache.
const (
	haveDirectIO = false
	oDirect      = 0
)

func clearDirect(*os.File) error { return nil }
