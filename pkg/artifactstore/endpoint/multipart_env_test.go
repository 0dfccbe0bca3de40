package endpoint

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// The faultyBackend is a Multiparter where its backend is one, and can
// break parts: failParts makes every PutPart after the first n fail as the
// store's 503 does; liePart makes PutPart report a wrong ETag.

var _ objects.Multiparter = (*faultyBackend)(nil)

func (f *faultyBackend) mp() objects.Multiparter {
	m, _ := f.Backend.(objects.Multiparter)
	return m
}

func (f *faultyBackend) MultipartCapable() bool { return f.mp() != nil && f.mp().MultipartCapable() }

func (f *faultyBackend) CreateMultipart(ctx context.Context, key string) (string, error) {
	return f.mp().CreateMultipart(ctx, key)
}

// errInjected is a store failure the test made.
var errInjected = errors.New("injected: " + objects.ErrSlowDown.Error())

func (f *faultyBackend) PutPart(ctx context.Context, key, id string, n int, body io.Reader, size int64) (objects.Part, error) {
	if limit := f.failParts.Load(); limit > 0 && f.partsPut.Add(1) > limit {
		_, _ = io.Copy(io.Discard, io.LimitReader(body, size))
		return objects.Part{}, errors.Join(objects.ErrSlowDown, errInjected)
	}
	p, err := f.mp().PutPart(ctx, key, id, n, body, size)
	if err == nil && f.liePart.Load() {
		p.ETag = strings.Repeat("0", 32)
	}
	return p, err
}

func (f *faultyBackend) ListParts(ctx context.Context, key, id string) ([]objects.Part, error) {
	return f.mp().ListParts(ctx, key, id)
}

func (f *faultyBackend) CompleteMultipart(ctx context.Context, key, id string, parts []objects.Part, crc string) (upload.ObjectInfo, error) {
	return f.mp().CompleteMultipart(ctx, key, id, parts, crc)
}

func (f *faultyBackend) AbortMultipart(ctx context.Context, key, id string) error {
	return f.mp().AbortMultipart(ctx, key, id)
}

func (f *faultyBackend) ListMultipartUploads(ctx context.Context, prefix string) ([]objects.MultipartUpload, error) {
	return f.mp().ListMultipartUploads(ctx, prefix)
}
