package directupload

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// deleteJob deletes the TrainJob and then its WorkerBinding, as the garbage
// collector would (this API server runs none), and waits until both are gone.
func (j *job) deleteJob(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := j.s.env.Client
	if err := c.Delete(ctx, testobj.MakeTrainJob(j.name, j.ns).Obj(), client.PropagationPolicy("Background")); err != nil {
		t.Fatal(err)
	}
	wb := &tetherv1.WorkerBinding{}
	wb.Namespace, wb.Name = j.ns, j.name
	if err := c.Delete(ctx, wb); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := c.Get(ctx, types.NamespacedName{Namespace: j.ns, Name: j.name}, &tetherv1.WorkerBinding{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the binding is not gone yet (%v)", err)
		}
		return nil
	})
}

// The binding deleted (its TrainJob deleted, the garbage collector taking
// the binding) while a URL is still valid: the bytes it writes are removed
// though no binding is left to hold the deadline; and so they are when the
// deletion happened while every replica was down, from the store's listing
// at the next start.
func TestURLUsedAfterTheBindingWasDeletedLeavesNothing(t *testing.T) {
	s := start(t, func(o *controlplane.Options) {
		o.PresignTTL = presignTTL
		o.UploadSweepMargin = sweepMargin
	})
	body := bytes.Repeat([]byte("orphaned "), 500)
	wantSwept := func(t *testing.T, j *job, a upload.AuthorizeResponse) {
		t.Helper()
		if time.Now().After(a.Expires) {
			t.Fatalf("the URL expired (%s) before it could be used; the test needs a longer TTL", a.Expires)
		}
		uploads := upload.UploadsPrefix + j.jobID + "/"
		// A sweep may run between the PUT and the listing (the start's
		// second scan of the store, a window after the control plane
		// started, can fall there): the PUT is then sent again, until the
		// listing shows the store kept it, so the removal below shows
		// something. A PUT that meets the sweep's delete of the same key
		// is refused by versitygw with 409 Conflict (seen once, in a full
		// make test): it is sent again too.
		for attempt := 1; ; attempt++ {
			code := put(t, a, body)
			var k []string
			switch {
			case code == http.StatusConflict && attempt < 5:
				t.Logf("the late PUT met the sweep (409); PUT again")
				time.Sleep(200 * time.Millisecond)
				continue
			case code != http.StatusOK:
				t.Fatalf("PUT through a still-valid URL after the binding was deleted: %d, want the store to accept it", code)
			}
			if k = s.keys(t, uploads); len(k) == 1 {
				break
			}
			if attempt >= 5 {
				t.Fatalf("the late PUT is not stored (%q) after %d PUTs: the test shows nothing", k, attempt)
			}
			t.Logf("the late PUT was swept before it was listed (%q); PUT again", k)
		}
		landed := time.Now()
		testenv.Eventually(t, presignTTL+sweepMargin+10*time.Second, func() error {
			if k := s.keys(t, uploads); len(k) > 0 {
				return fmt.Errorf("left under %s %s after the late PUT: %q", uploads, time.Since(landed).Round(time.Second), k)
			}
			return nil
		})
		t.Logf("removed %s after it landed", time.Since(landed).Round(100*time.Millisecond))
	}

	t.Run("ControlPlaneUp", func(t *testing.T) {
		j := s.newJob(t, "deleted-1")
		j.register(t)
		a := j.authorize(t, "late.bin", int64(len(body)))
		j.deleteJob(t)
		wantSwept(t, j, a)
	})
	t.Run("DeletedWhileEveryReplicaWasDown", func(t *testing.T) {
		j := s.newJob(t, "deleted-2")
		j.register(t)
		a := j.authorize(t, "late.bin", int64(len(body)))
		if err := s.env.StopControlPlane(); err != nil {
			t.Fatal(err)
		}
		j.deleteJob(t)
		if err := s.env.RestartControlPlane(context.Background()); err != nil {
			t.Fatal(err)
		}
		wantSwept(t, j, a)
	})
}
