package directupload

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
)

const (
	presignTTL  = 10 * time.Second
	sweepMargin = 2 * time.Second
)

// TestURLUsedAfterTheBindingEndedLeavesNothing: a presigned direct-upload
// URL outlives its binding by its TTL. A PUT through it after the binding Succeeded (and its uploads were
// dropped) is accepted by the store, but what it wrote is removed by the
// controller's sweep before the URL's deadline has long passed; after the
// deadline the URL itself is refused by the store, so nothing can land
// once the sweeping stops.
func TestURLUsedAfterTheBindingEndedLeavesNothing(t *testing.T) {
	s := start(t, func(o *controlplane.Options) {
		o.PresignTTL = presignTTL
		o.UploadSweepMargin = sweepMargin
	})
	j := s.newJob(t, "sweep-1")
	j.register(t)
	body := bytes.Repeat([]byte("late bytes "), 1000)
	// Three URLs presigned while the job runs: one used before the end and
	// never committed (the end's cleanup drops it), one used after the
	// end, one after its expiry.
	inFlight := j.authorize(t, "in-flight.bin", int64(len(body)))
	late := j.authorize(t, "late.bin", int64(len(body)))
	expired := j.authorize(t, "expired.bin", int64(len(body)))
	if code := put(t, inFlight, body); code != http.StatusOK {
		t.Fatalf("PUT while running: %d", code)
	}
	uploads := upload.UploadsPrefix + j.jobID + "/"
	j.flush(t)
	j.succeed(t)
	testenv.Eventually(t, 10*time.Second, func() error {
		if k := s.keys(t, uploads+inFlight.Upload); len(k) > 0 {
			return fmt.Errorf("the uncommitted upload is still stored: %q", k)
		}
		return nil
	})

	if time.Now().After(late.Expires) {
		t.Fatalf("the URL expired (%s) before the job ended; the test needs a longer TTL", late.Expires)
	}
	putAt := time.Now()
	if code := put(t, late, body); code != http.StatusOK {
		t.Fatalf("PUT through a still-valid URL after Succeeded: %d, want the store to accept it", code)
	}
	if k := s.keys(t, uploads+late.Upload); len(k) != 1 {
		// A sweep may run between the PUT and the listing (on a loaded
		// machine it did): then the object existed and was removed, which
		// is what this test shows, only sooner. Anything else shows nothing.
		du := j.binding(t).Status.DirectUploads
		if du == nil || du.SweptTime == nil || du.SweptTime.Time.Before(putAt.Truncate(time.Second)) {
			t.Fatalf("the late PUT is not stored (%q) and no sweep ran after it: the test shows nothing", k)
		}
		t.Logf("the late PUT's object was swept before it could be listed (last sweep %s)", du.SweptTime)
	}
	landed := time.Now()
	testenv.Eventually(t, presignTTL+sweepMargin+10*time.Second, func() error {
		if k := s.keys(t, uploads); len(k) > 0 {
			return fmt.Errorf("left under %s %s after the late PUT: %q", uploads, time.Since(landed).Round(time.Second), k)
		}
		return nil
	})
	t.Logf("the late PUT's object was removed %s after it landed", time.Since(landed).Round(100*time.Millisecond))

	// After its expiry the URL writes nothing: the sweeping may stop.
	time.Sleep(time.Until(expired.Expires) + time.Second)
	if code := put(t, expired, body); code == http.StatusOK {
		t.Fatalf("PUT through an expired URL: %d, want the store to refuse it", code)
	}
	if k := s.keys(t, uploads); len(k) > 0 {
		t.Fatalf("an expired URL stored %q", k)
	}
	// The binding records the deadline and the last sweep.
	testenv.Eventually(t, presignTTL+sweepMargin+5*time.Second, func() error {
		du := j.binding(t).Status.DirectUploads
		if du == nil || du.SweptTime == nil {
			return errors.New("status.directUploads records no last sweep yet")
		}
		if du.SweptTime.Before(&du.ExpireTime) {
			return fmt.Errorf("last sweep %s before the deadline %s", du.SweptTime, du.ExpireTime)
		}
		return nil
	})
}
