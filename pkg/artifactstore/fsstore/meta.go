package fsstore

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"

	"github.com/tether-dev/tether/pkg/upload"
)

// An object's metadata (its MD5, parts and checksum, and the fingerprint of
// the data file it describes): in the data file's extended attribute, or a
// metadata file where the file system takes none.

// setXattr records m on f unless b keeps metadata files.
func (b FSBackend) setXattr(f *os.File, m fsMeta) error {
	if b.metaFiles {
		return errNoXattr
	}
	return setMetaXattr(f, m)
}

// errNoXattr: the file system does not take user extended attributes.
var errNoXattr = errors.New("no user extended attributes on this file system")

// fsMeta is the metadata of an object.
type fsMeta struct {
	// MD5 is the object's MD5, or for an object stored in parts the MD5
	// of its parts' MD5s (its ETag without "-<parts>").
	MD5 string `json:"md5"`
	// Parts is the number of parts of an object stored in parts, 0 for
	// one stored by Put.
	Parts int `json:"parts,omitempty"`
	// CRC64NVME is the CRC-64/NVME (S3's form) of an object stored in
	// parts, which the completion checked.
	CRC64NVME string `json:"crc64nvme,omitempty"`
	fsFingerprint
}

// etag is the object's ETag, as S3 would give it.
func (m fsMeta) etag() string {
	if m.Parts > 0 {
		return m.MD5 + "-" + strconv.Itoa(m.Parts)
	}
	return m.MD5
}

// info is the object as Head reports it, the data file fi.
func (m fsMeta) info(fi os.FileInfo) upload.ObjectInfo {
	return upload.ObjectInfo{Size: fi.Size(), ETag: m.etag(), CRC64NVME: m.CRC64NVME}
}

func writeMeta(root *os.Root, p string, meta fsMeta) error {
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	tmp, f, err := createTemp(root)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameInto(root, tmp, metaPath(p))
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

func readMeta(root *os.Root, p string) (fsMeta, error) {
	b, err := root.ReadFile(metaPath(p))
	if err != nil {
		return fsMeta{}, err
	}
	var m fsMeta
	err = json.Unmarshal(b, &m)
	return m, err
}
