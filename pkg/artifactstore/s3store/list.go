package s3store

import (
	"context"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
)

var (
	_ objects.PageLister = (*S3Backend)(nil)
	_ objects.DirLister  = (*S3Backend)(nil)
)

// ListPage lists at most n keys under prefix: one LIST request of n keys
// (S3 answers at most 1,000 a page), and a second one only to say whether
// more follow when the page was full.
func (b *S3Backend) ListPage(ctx context.Context, prefix string, n int) ([]string, bool, error) {
	if err := b.awaitProbed(ctx); err != nil {
		return nil, false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine
	var keys []string
	for oi := range b.Client.ListObjects(ctx, b.Bucket, minio.ListObjectsOptions{Prefix: b.name(prefix), Recursive: true, MaxKeys: n}) {
		if oi.Err != nil {
			return nil, false, fmt.Errorf("S3 LIST %s: %w", b.name(prefix), oi.Err)
		}
		if len(keys) == n {
			return keys, true, nil
		}
		keys = append(keys, strings.TrimPrefix(oi.Key, b.Prefix))
	}
	return keys, false, nil
}

// ListDirs calls fn with each name one level under prefix that holds
// objects (S3's common prefixes, delimiter "/"), page by page.
func (b *S3Backend) ListDirs(ctx context.Context, prefix string, fn func(name string) error) error {
	if err := b.awaitProbed(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := b.name(prefix)
	for oi := range b.Client.ListObjects(ctx, b.Bucket, minio.ListObjectsOptions{Prefix: full}) {
		if oi.Err != nil {
			return fmt.Errorf("S3 LIST %s (delimiter /): %w", full, oi.Err)
		}
		name, isDir := strings.CutSuffix(strings.TrimPrefix(oi.Key, full), "/")
		if !isDir || name == "" {
			continue
		}
		if err := fn(name); err != nil {
			return err
		}
	}
	return nil
}
