package soakcheck

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// s3Store reads a real versitygw bucket and lists its multipart uploads
// through the s3 backend, as the soak reads its store.
type s3Store struct{ *s3store.S3Backend }

func (s s3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, _, err := s.S3Backend.Open(ctx, key)
	return rc, err
}

func newS3Store(t *testing.T) s3Store {
	t.Helper()
	ctx := context.Background()
	srv, err := s3server.Start(ctx, s3server.Options{Dir: t.TempDir(), AccessKey: "soakcheck-access", SecretKey: "soakcheck-secret-0123456789"})
	if errors.Is(err, s3server.ErrNoBinary) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if err := srv.MakeBucket(ctx, "artifacts", false); err != nil {
		t.Fatal(err)
	}
	b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: srv.Endpoint, AccessKey: "soakcheck-access", SecretKey: "soakcheck-secret-0123456789",
		Region: "us-east-1", Bucket: "artifacts"})
	if err != nil {
		t.Fatal(err)
	}
	return s3Store{b}
}

// TestCheckMultipartUploadsLeftBehind: on a store that lists its open
// multipart uploads, one of an ended job, or of no job the run knows, is
// left behind; one of a job still running is not (it may be completed);
// once they are aborted the run passes.
func TestCheckMultipartUploadsLeftBehind(t *testing.T) {
	ctx := context.Background()
	s := newS3Store(t)
	start := func(key string) (string, string) {
		id, err := s.CreateMultipart(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutPart(ctx, key, id, 1, strings.NewReader("billed"), 6); err != nil {
			t.Fatal(err)
		}
		return key, id
	}
	endedKey, endedID := start("job-a/nodes/0/big.bin")
	strayKey, strayID := start("job-x/nodes/0/big.bin")
	start("job-r/nodes/0/big.bin")
	// A start-up probe cut short: a later probe aborts it, not a job's.
	start(s3store.ProbePrefix + "20261207T000000Z-0123456789abcdef/multipart")
	jobs := []Job{
		{Namespace: "ns", Name: "a", Labeled: true, JobID: "job-a", Nodes: 1, Ended: true, Binding: binding("a", "job-a", tetherv1.PhaseFailed)},
		{Namespace: "ns", Name: "r", Labeled: true, JobID: "job-r", Nodes: 1, Binding: binding("r", "job-r", tetherv1.PhaseRunning)},
	}
	leftBehind := func() (checked int, files []string) {
		for _, inv := range Check(ctx, Input{Jobs: jobs, Store: s}).Invariants {
			if inv.Name != NothingLeftBehind {
				continue
			}
			for _, v := range inv.Violations {
				if !strings.Contains(v.Detail, "open multipart upload") {
					t.Errorf("nothing left behind: %s %s: %s", v.Job, v.File, v.Detail)
				}
				files = append(files, v.Job+" "+v.File)
			}
			return inv.Checked, files
		}
		t.Fatal("no nothing-left-behind invariant in the report")
		return 0, nil
	}
	// Checked: job-a's pending objects and the listing of uploads.
	if checked, files := leftBehind(); checked != 2 || !slices.Equal(files, []string{"ns/a " + endedKey, " " + strayKey}) {
		t.Fatalf("nothing left behind: %d checked, violations %q; want 2 checked, job-a's and the stray upload", checked, files)
	}
	for key, id := range map[string]string{endedKey: endedID, strayKey: strayID} {
		if err := s.AbortMultipart(ctx, key, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, files := leftBehind(); len(files) > 0 {
		t.Fatalf("after the aborts: violations %q", files)
	}
}
