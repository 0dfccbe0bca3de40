package pending

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
)

// Multipart uploads are real ones on the S3 servers, through the s3
// backend's Multiparter; a part stored in each makes it one the store bills
// until it is aborted.

// multipartBackend is what these tests sweep: a backend with uploads, and
// the raw bucket to see past its key prefix.
type multipartBackend struct {
	upload.Backend
	m   objects.Multiparter
	raw *s3store.S3Backend
}

func newMultipartBackends(t *testing.T, v *storetest.S3) []struct {
	name string
	b    multipartBackend
} {
	withPrefix := v.NewBackend(t, "pre/")
	plain := v.NewBackend(t, "")
	return []struct {
		name string
		b    multipartBackend
	}{
		{"S3", multipartBackend{withPrefix, withPrefix, withPrefix}},
		// Without paged and delimiter listings (the generic fallback).
		{"ListFallback", multipartBackend{listOnlyMultipart{plain, plain, plain}, plain, plain}},
	}
}

// listOnlyMultipart hides the S3 backend's paged and delimiter listings,
// not its uploads nor its reads.
type listOnlyMultipart struct {
	upload.Backend
	objects.Multiparter
	objects.Opener
}

// startUpload starts an upload to key and stores its part 1.
func startUpload(t *testing.T, m objects.Multiparter, key string) string {
	t.Helper()
	ctx := context.Background()
	id, err := m.CreateMultipart(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutPart(ctx, key, id, 1, strings.NewReader("a part the store bills"), 22); err != nil {
		t.Fatal(err)
	}
	return id
}

// recordUpload writes the endpoint's state record of an upload of key (of
// job jobID) stored at target and returns the record's key.
func recordUpload(t *testing.T, b upload.Backend, jobID, key, target, id string) string {
	t.Helper()
	sk := objects.MultipartStateKey(jobID, key)
	st := &objects.MultipartState{Key: key, Target: target, UploadID: id, Size: 6 << 30, PartSize: 64 << 20,
		Parts: []objects.StatePart{{Number: 1, Size: 22}}, Created: time.Now()}
	if err := objects.WriteMultipartState(context.Background(), b, sk, st); err != nil {
		t.Fatal(err)
	}
	return sk
}

// openUploads is "key id" of every open upload under prefix.
func openUploads(t *testing.T, m objects.Multiparter, prefix string) []string {
	t.Helper()
	ups, err := m.ListMultipartUploads(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range ups {
		out = append(out, u.Key+" "+u.ID)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// A sweep aborts a job's recorded upload before it deletes the record,
// then the uploads the store lists under the job's prefix whose record was
// never written (one at the client's key's pending key), page by page with
// the objects under the sweep's limit; another job's uploads, and an
// upload outside the backend's key prefix, stay open.
func TestSweepUploadsAbortsMultipart(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		for _, tc := range newMultipartBackends(t, v) {
			t.Run(tc.name, func(t *testing.T) { testSweepUploadsAbortsMultipart(t, tc.b) })
		}
	})
}

func testSweepUploadsAbortsMultipart(t *testing.T, b multipartBackend) {
	ctx := context.Background()
	h := &Store{Backend: b.Backend, Locks: &objects.KeyLocks{}}
	const big = "job-a/nodes/0/big.bin"
	recorded := startUpload(t, b.m, big)
	record := recordUpload(t, b, "job-a", big, big, recorded)
	crashed := startUpload(t, b.m, objects.PendingKey("job-a/nodes/0/ckpt.pt"))
	crashed2 := startUpload(t, b.m, "job-a/nodes/1/other.bin")
	other := startUpload(t, b.m, "job-b/nodes/0/big.bin")
	otherRecord := recordUpload(t, b, "job-b", "job-b/nodes/0/big.bin", "job-b/nodes/0/big.bin", other)
	mustPutKey(t, b, upload.UploadsPrefix+"job-a/u0")
	mustPutKey(t, b, upload.UploadsPrefix+"job-a/u1")
	mustPutKey(t, b, "job-a/model.bin")
	// An upload of job-a's key outside the backend's prefix is not the
	// backend's (with a prefix, the bucket's root is another tenant's).
	outside := "job-a/outside.bin"
	if b.raw.Prefix != "" {
		id, err := minio.Core{Client: b.raw.Client}.NewMultipartUpload(ctx, b.raw.Bucket, outside, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		outside += " " + id
	}

	// job-b's only object under the uploads prefix is its record: it still
	// names job-b for the start-up scan.
	var jobs []string
	if err := h.UploadJobs(ctx, func(j string) error { jobs = append(jobs, j); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(jobs, []string{"job-a", "job-b"}) {
		t.Fatalf("UploadJobs: %q, want job-a and job-b (whose only object there is a multipart state record)", jobs)
	}

	// Page 1: the record (its upload aborted) and u0.
	n, more, err := h.SweepUploads(ctx, "job-a", 2)
	if err != nil || n != 2 || !more {
		t.Fatalf("first page: %d, more %v, %v; want 2, more", n, more, err)
	}
	if got, want := openUploads(t, b.m, "job-a/"), sorted(objects.PendingKey("job-a/nodes/0/ckpt.pt")+" "+crashed, "job-a/nodes/1/other.bin "+crashed2); !slices.Equal(got, want) {
		t.Fatalf("after the page that held the record: open %q, want %q (the recorded upload aborted)", got, want)
	}
	if _, err := b.m.ListParts(ctx, big, recorded); !errors.Is(err, objects.ErrNoSuchUpload) {
		t.Fatalf("the recorded upload's parts after its abort: %v, want NoSuchUpload", err)
	}
	if _, err := b.Head(ctx, record); !errors.Is(err, upload.ErrNotFound) {
		t.Fatalf("the state record after its upload was aborted: %v, want it deleted", err)
	}
	// Page 2: u1 and one unrecorded upload; page 3: the other.
	counts := []int{n}
	for more {
		n, more, err = h.SweepUploads(ctx, "job-a", 2)
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, n)
	}
	if !slices.Equal(counts, []int{2, 2, 1}) {
		t.Fatalf("sweep pages: %v, want [2 2 1]", counts)
	}
	if got := openUploads(t, b.m, ""); !slices.Equal(got, []string{"job-b/nodes/0/big.bin " + other}) {
		t.Fatalf("open uploads after the sweep: %q, want job-b's alone", got)
	}
	left, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{otherRecord, "job-a/model.bin"}; !sameKeys(left, want) {
		t.Fatalf("left after the sweep: %q, want %q", left, want)
	}
	if b.raw.Prefix != "" {
		raw := &s3store.S3Backend{Client: b.raw.Client, Bucket: b.raw.Bucket}
		if got := openUploads(t, raw, "job-a/"); !slices.Equal(got, []string{outside}) {
			t.Fatalf("open uploads of the bucket's own job-a/: %q, want %q (outside the backend's prefix)", got, outside)
		}
	}
}

// The job's end (DropPending, also Promote's) aborts its uploads at once,
// recorded or not, and deletes the records.
func TestDropPendingAbortsMultipart(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		b := v.NewBackend(t, "pre/")
		h := &Store{Backend: b, Locks: &objects.KeyLocks{}}
		const key = "job-c/nodes/0/big.bin"
		id := startUpload(t, b, objects.PendingKey(key))
		recordUpload(t, b, "job-c", key, objects.PendingKey(key), id)
		startUpload(t, b, "job-c/nodes/0/unrecorded.bin")
		mustPutKey(t, b, objects.PendingKey("job-c/nodes/0/small.bin"))
		if _, err := h.DropPending(context.Background(), "job-c"); err != nil {
			t.Fatal(err)
		}
		if got := openUploads(t, b, ""); len(got) != 0 {
			t.Fatalf("open uploads after the job's end: %q", got)
		}
		if left, err := b.List(context.Background(), ""); err != nil || len(left) != 0 {
			t.Fatalf("left after the job's end: %q %v", left, err)
		}
	})
}

// At start-up the uploads of job ids no live binding holds are aborted,
// each job asked about once; a live job's, and the server's own prefixes',
// stay.
func TestAbortUnownedUploadsMultipart(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		ctx := context.Background()
		b := v.NewBackend(t, "pre/")
		h := &Store{Backend: b, Locks: &objects.KeyLocks{}}
		live := startUpload(t, b, "job-live/nodes/0/big.bin")
		startUpload(t, b, "job-gone/nodes/0/a.bin")
		startUpload(t, b, objects.PendingKey("job-gone/nodes/0/b.bin"))
		probe := startUpload(t, b, s3store.ProbePrefix+"x/parts.bin")
		var asked []string
		n, err := h.AbortUnownedUploads(ctx, func(jobID string) (bool, error) {
			asked = append(asked, jobID)
			return jobID == "job-live", nil
		})
		if err != nil || n != 2 {
			t.Fatalf("AbortUnownedUploads: %d, %v; want job-gone's 2 aborted", n, err)
		}
		if slices.Sort(asked); !slices.Equal(asked, []string{"job-gone", "job-live"}) {
			t.Fatalf("asked about %q, want each job once", asked)
		}
		want := sorted("job-live/nodes/0/big.bin "+live, s3store.ProbePrefix+"x/parts.bin "+probe)
		if got := openUploads(t, b, ""); !slices.Equal(got, want) {
			t.Fatalf("open after the start-up abort: %q, want %q", got, want)
		}
		stop := errors.New("the cache is gone")
		if _, err := h.AbortUnownedUploads(ctx, func(string) (bool, error) { return false, stop }); !errors.Is(err, stop) {
			t.Fatalf("owned's error: %v", err)
		}
		if got := openUploads(t, b, ""); !slices.Equal(got, want) {
			t.Fatalf("open after owned failed: %q, want %q", got, want)
		}
	})
}
