//go:build !unix

package fsstore

import "os"

// inode is 0 where the platform does not expose inode numbers; the
// fingerprint is then size and modification time.
func inode(os.FileInfo) uint64 { return 0 }

// setMetaXattr: no extended attributes here; metadata files instead.
func setMetaXattr(*os.File, fsMeta) error { return errNoXattr }

func metaFromXattr(*os.File) (fsMeta, bool) { return fsMeta{}, false }
