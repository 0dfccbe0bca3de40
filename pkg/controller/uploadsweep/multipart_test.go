package uploadsweep_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/controller/internal/storeops"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// Every multipart upload is completed or aborted, on a store that
// presigns nothing (where the sweeper ran for nothing before) as on one
// that presigns. At start-up the uploads of jobs no live binding holds are
// aborted: a deleted binding's, recorded or never recorded, and one an
// ended binding swept for good left; a running binding's stay. A binding
// that ends has its job's uploads aborted and their records deleted, and
// its last sweep is recorded only after; so does a binding deleted.
func TestUploadSweepMultipart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		uploads func(*store.Store) storeops.DirectUploads
	}{
		{"ProxiedOnly", func(s *store.Store) storeops.DirectUploads { return proxiedOnly{s} }},
		{"Presigning", func(s *store.Store) storeops.DirectUploads { return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSweepEnv(t)
			testUploadSweepMultipart(t, e, tc.uploads(store.New(e.b, store.Options{Direct: store.DirectOptions{TTL: 2 * time.Second}})))
		})
	}
}

func testUploadSweepMultipart(t *testing.T, e *sweepEnv, uploads storeops.DirectUploads) {
	live := e.binding(t, "live", "job-live", tetherv1.PhaseRunning)
	liveUp := e.upload(t, "job-live", "job-live/nodes/0/big.bin", true)
	long := metav1.NewTime(time.Now().Add(-time.Hour))
	e.setPhase(t, e.binding(t, "old", "job-old", tetherv1.PhaseSucceeded), tetherv1.PhaseSucceeded,
		&tetherv1.DirectUploadsStatus{ExpireTime: long, SweptTime: &long})
	oldUp := e.upload(t, "job-old", "job-old/nodes/0/late.bin", false)
	goneRecorded := e.upload(t, "job-gone", "job-gone/nodes/0/a.bin", true)
	goneUnrecorded := e.upload(t, "job-gone-unrecorded", objects.PendingKey("job-gone-unrecorded/nodes/0/b.bin"), false)

	e.runSweeper(t, uploads)
	e.awaitAborted(t, "at start-up, the uploads no live binding holds", goneRecorded, goneUnrecorded, oldUp)
	// One listing of the store's uploads, in key order, decided job-live's
	// before job-old's.
	if o := e.open(t, liveUp); len(o) != 1 {
		t.Fatal("a running binding's upload was aborted at start-up")
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if r := e.records(t, "job-gone"); len(r) > 0 {
			return fmt.Errorf("the deleted binding's records are still stored: %q", r)
		}
		return nil
	})

	e.setPhase(t, live, tetherv1.PhaseSucceeded, nil)
	e.awaitAborted(t, "after the binding ended", liveUp)
	testenv.Eventually(t, 20*time.Second, func() error {
		du := e.directUploads(t, live)
		switch {
		case du == nil || du.SweptTime == nil:
			return errors.New("status.directUploads records no last sweep yet")
		case du.SweptTime.Before(&du.ExpireTime):
			return fmt.Errorf("last sweep %s before the deadline %s", du.SweptTime, du.ExpireTime)
		}
		return nil
	})
	if r := e.records(t, "job-live"); len(r) > 0 {
		t.Fatalf("the binding records its last sweep, and its records are still stored: %q", r)
	}

	doomed := e.binding(t, "doomed", "job-doomed", tetherv1.PhaseRunning)
	doomedUp := e.upload(t, "job-doomed", "job-doomed/nodes/0/c.bin", false)
	if err := e.c.Delete(context.Background(), doomed); err != nil {
		t.Fatal(err)
	}
	e.awaitAborted(t, "after the binding was deleted", doomedUp)
}
