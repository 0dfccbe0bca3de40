package fsstore

import (
	"context"
	"io"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

var _ objects.Opener = FSBackend{}

// Open opens the object's data file. The size and ETag are the file's own
// (computed again if the metadata does not describe it), so a file changed
// on disk behind the store's back shows its real MD5.
func (b FSBackend) Open(_ context.Context, key string) (io.ReadCloser, upload.ObjectInfo, error) {
	p, err := fsPath(key)
	if err != nil {
		return nil, upload.ObjectInfo{}, err
	}
	root, err := b.open()
	if err != nil {
		return nil, upload.ObjectInfo{}, err
	}
	defer b.release(root)
	f, fi, err := openObject(root, p)
	if err != nil {
		return nil, upload.ObjectInfo{}, err
	}
	m, _, err := b.objectMeta(root, p, f, fi)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = f.Close()
		return nil, upload.ObjectInfo{}, err
	}
	return f, m.info(fi), nil
}
