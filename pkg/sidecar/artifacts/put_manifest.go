package artifacts

import (
	"bytes"
	"context"

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
	var sum string
	attempts, err := u.retry(ctx, upload.ManifestName, func(ctx context.Context, _ int) error {
		s, err := u.put(ctx, key, bytes.NewReader(data), int64(len(data)))
		sum = s
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return Result{Path: upload.ManifestName, Size: int64(len(data)), MD5: sum, How: Uploaded, Attempts: attempts}, nil
}
