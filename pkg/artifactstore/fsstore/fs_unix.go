//go:build unix

package fsstore

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// inode is the file's inode number, part of an object's fingerprint.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}

// metaXattr is the extended attribute holding an object's metadata on its
// data file: set before the file is fsynced and renamed into place, it is
// durable with the data, travels with a hard link, and costs one system
// call where a metadata file costs a create, a write and a rename
// (test/performance/sync).
const metaXattr = "user.tether.meta"

// The attribute's value is binary and small (xattrSize bytes: a version,
// the MD5, size, mtime and inode; an object stored in parts adds its part
// count and CRC-64/NVME, xattrPartsSize bytes), so that it fits in the
// inode itself (ext4's 256-byte inodes hold about 100 bytes of attributes;
// a larger one costs a block of its own, written and journaled with every
// PUT).
const (
	xattrVersion      = 1
	xattrSize         = 1 + md5.Size + 3*8
	xattrPartsVersion = 2
	xattrPartsSize    = xattrSize + 4 + 8
)

// setMetaXattr records m on f. errNoXattr: the file system does not take
// user extended attributes; the caller writes a metadata file instead.
func setMetaXattr(f *os.File, m fsMeta) error {
	var b [xattrPartsSize]byte
	b[0] = xattrVersion
	if n, err := hex.Decode(b[1:1+md5.Size], []byte(m.MD5)); err != nil || n != md5.Size {
		return fmt.Errorf("metadata with an MD5 of %q", m.MD5)
	}
	le := binary.LittleEndian
	le.PutUint64(b[1+md5.Size:], uint64(m.Size))
	le.PutUint64(b[1+md5.Size+8:], uint64(m.ModTime))
	le.PutUint64(b[1+md5.Size+16:], m.Inode)
	v := b[:xattrSize]
	if m.Parts > 0 {
		crc, err := base64.StdEncoding.DecodeString(m.CRC64NVME)
		if err != nil || len(crc) != 8 {
			return fmt.Errorf("metadata with a CRC-64/NVME of %q", m.CRC64NVME)
		}
		b[0] = xattrPartsVersion
		le.PutUint32(b[xattrSize:], uint32(m.Parts))
		copy(b[xattrSize+4:], crc)
		v = b[:]
	}
	err := unix.Fsetxattr(int(f.Fd()), metaXattr, v, 0)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM) {
		return errNoXattr
	}
	return err
}

// metaFromXattr is f's recorded metadata, if it has any of a known version.
func metaFromXattr(f *os.File) (fsMeta, bool) {
	var b [xattrPartsSize + 1]byte // one more: a longer value is no known version's
	n, err := unix.Fgetxattr(int(f.Fd()), metaXattr, b[:])
	if err != nil || !(n == xattrSize && b[0] == xattrVersion || n == xattrPartsSize && b[0] == xattrPartsVersion) {
		return fsMeta{}, false
	}
	le := binary.LittleEndian
	m := fsMeta{MD5: hex.EncodeToString(b[1 : 1+md5.Size]), fsFingerprint: fsFingerprint{
		Size:    int64(le.Uint64(b[1+md5.Size:])),
		ModTime: int64(le.Uint64(b[1+md5.Size+8:])),
		Inode:   le.Uint64(b[1+md5.Size+16:]),
	}}
	if b[0] == xattrPartsVersion {
		m.Parts = int(le.Uint32(b[xattrSize:]))
		m.CRC64NVME = base64.StdEncoding.EncodeToString(b[xattrSize+4 : xattrPartsSize])
	}
	return m, true
}
