package pending

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// A sweep deletes one page of a job's pending uploads at a time, says when
// more remain, and never touches another job's; the job ids with uploads
// are listed one level deep, on the S3 backend (delimiter listing, pages of
// the asked size) and on the generic fallback alike.
// The S3 servers are shared by this binary's tests and stopped at its end.
func TestMain(m *testing.M) { storetest.Main(m) }

func TestSweepUploads(t *testing.T) {
	storetest.EachS3(t, testSweepUploads)
}

func testSweepUploads(t *testing.T, v *storetest.S3) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		backend func(*testing.T) upload.Backend
	}{
		{"S3", func(t *testing.T) upload.Backend { return v.NewBackend(t, "pre/") }},
		{"ListFallback", func(t *testing.T) upload.Backend { return listOnly{v.NewBackend(t, "")} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.backend(t)
			h := &Store{Backend: b, Locks: &objects.KeyLocks{}}
			for i := range 5 {
				mustPutKey(t, b, fmt.Sprintf("%sjob-a/u%d", upload.UploadsPrefix, i))
			}
			mustPutKey(t, b, upload.UploadsPrefix+"job-a/u0.committed")
			mustPutKey(t, b, upload.UploadsPrefix+"job-b/u0")
			mustPutKey(t, b, "job-a/model.bin") // the job's own objects stay
			var jobs []string
			if err := h.UploadJobs(ctx, func(j string) error { jobs = append(jobs, j); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(jobs, []string{"job-a", "job-b"}) {
				t.Fatalf("UploadJobs: %q", jobs)
			}
			var counts []int
			for more := true; more; {
				n, m, err := h.SweepUploads(ctx, "job-a", 4)
				if err != nil {
					t.Fatal(err)
				}
				counts, more = append(counts, n), m
			}
			if !slices.Equal(counts, []int{4, 2}) {
				t.Fatalf("sweep pages: %v, want [4 2]", counts)
			}
			left, err := b.List(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{upload.UploadsPrefix + "job-b/u0", "job-a/model.bin"}; !sameKeys(left, want) {
				t.Fatalf("left after the sweep: %q, want %q", left, want)
			}
			if _, _, err := h.SweepUploads(ctx, "../job-b", 4); err == nil {
				t.Fatal("a job id with a slash was swept")
			}
		})
	}
}

// listOnly hides the S3 backend's paged and delimiter listings.
type listOnly struct{ upload.Backend }

func mustPutKey(t *testing.T, b upload.Backend, key string) {
	t.Helper()
	if _, err := b.Put(context.Background(), key, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
}

func sameKeys(got, want []string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}
