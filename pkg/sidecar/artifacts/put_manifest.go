package artifacts

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"

	"github.com/tether-dev/tether/pkg/upload"
)

// PutManifest uploads m to <job-id>/manifest.json and verifies it like a
// file. It is the caller's job to upload it last.
func (u *Uploader) PutManifest(ctx context.Context, m upload.Manifest) (Result, error) {
	data, err := EncodeManifest(m)
	if err != nil {
		return Result{}, &FileError{Path: upload.ManifestName, Permanent: true, Err: err}
	}
	key := u.Key(upload.ManifestName)
	// Read whole already: its digests go before the body.
	md5sum := md5.Sum(data)
	crc := upload.CRC64NVMEOf(data)
	attempts, err := u.retry(ctx, upload.ManifestName, func(ctx context.Context, _ int) error {
		_, _, err := u.putSum(ctx, key, bytes.NewReader(data), int64(len(data)), md5sum[:], crc)
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Path: upload.ManifestName, Size: int64(len(data)), MD5: hex.EncodeToString(md5sum[:]), CRC64NVME: crc, How: Uploaded, Attempts: attempts}, nil
}
