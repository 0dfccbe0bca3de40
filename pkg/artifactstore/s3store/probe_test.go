package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// TestProbe runs the start-up probe against each S3 server, as it is and
// behind the tests' front in each fault mode, and checks what it finds,
// what it chooses, and that it leaves nothing behind. What each server
// shows is pinned where TestS3ServerBehaviour pins it (docs/artifacts.md).
func TestProbe(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		t.Run("plain", func(t *testing.T) {
			b := v.NewBackend(t, "tether/")
			caps, err := b.Probe(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v: %+v", v.Impl, caps)
			if !caps.ETagMD5 || !caps.Checksums || !caps.Copy || !caps.PresignedPut || !caps.IfNoneMatch || !caps.IfMatch {
				t.Errorf("%+v: want ETag = MD5, checksums, copy, presigned PUT, PUT If-None-Match and If-Match", caps)
			}
			// docs/artifacts.md: versitygw adds a CRC-64/NVME to a PUT
			// without one and ignores a copy's destination conditions;
			// SeaweedFS does neither.
			if want := v.Impl == s3server.VersityGW; caps.DefaultChecksum != want || caps.CopyIfMatch == want || caps.CopyIfNoneMatch == want {
				t.Errorf("%+v: default checksum %v, copy conditions %v", caps, want, !want)
			}
			// docs/artifacts.md: both keep and check a multipart upload's
			// full-object CRC-64/NVME and honour a completion's
			// conditions; versitygw adds one to an upload that asked for
			// none, SeaweedFS does not.
			if !caps.MultipartChecksum || !caps.MultipartIfNoneMatch || !caps.MultipartIfMatch || caps.MultipartDefaultChecksum != (v.Impl == s3server.VersityGW) {
				t.Errorf("%+v: want multipart checksums and conditions, a default multipart checksum on versitygw only", caps)
			}
			ch, err := caps.Choose()
			if err != nil || ch.Verification.ByChecksum || !ch.Direct || !ch.ConditionalPut {
				t.Errorf("choice %+v, %v: want the MD5, direct uploads, conditional PUTs", ch, err)
			}
			if !ch.Multipart || !ch.ConditionalComplete || ch.CopyPartsUnasked != caps.MultipartDefaultChecksum || !strings.Contains(ch.Why, "stored in parts") {
				t.Errorf("choice %+v: want multipart uploads, conditional completions, copies in parts unasked where the store adds a checksum", ch)
			}
			if b.MultipartCapable() {
				t.Error("MultipartCapable before Use")
			}
			b.Use(ch)
			if !b.MultipartCapable() {
				t.Error("MultipartCapable is false after Use of a choice with multipart uploads")
			}
			if keys, err := b.List(t.Context(), s3store.ProbePrefix); err != nil || len(keys) != 0 {
				t.Errorf("the probe left %q (%v)", keys, err)
			}
			if ups, err := b.ListMultipartUploads(t.Context(), s3store.ProbePrefix); err != nil || len(ups) != 0 {
				t.Errorf("the probe left multipart uploads %+v (%v)", ups, err)
			}
		})
		for _, tc := range []struct {
			fault s3server.Fault
			// byChecksum is the verification chosen; refused: none is left.
			byChecksum, refused, etagMD5, checksums bool
			// noMultipart: a store that keeps or returns no true checksum
			// stores nothing in parts. (The front cannot fake an SSE-KMS
			// store's multipart uploads: it rewrites the parts' ETags but
			// not the completion's list of them.)
			noMultipart bool
		}{
			{fault: s3server.FaultRandomETag, byChecksum: true, checksums: true},
			{fault: s3server.FaultRandomETag | s3server.FaultNoChecksums, refused: true},
			{fault: s3server.FaultNoChecksums, etagMD5: true, noMultipart: true},
			{fault: s3server.FaultWrongChecksum, etagMD5: true, noMultipart: true},
			{fault: s3server.FaultWrongETag | s3server.FaultWrongChecksum, refused: true},
		} {
			t.Run(tc.fault.String(), func(t *testing.T) {
				b, _ := v.NewFrontedBackend(t, tc.fault)
				caps, err := b.Probe(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if caps.ETagMD5 != tc.etagMD5 || caps.Checksums != tc.checksums {
					t.Errorf("%+v: want ETag = MD5 %v, checksums %v", caps, tc.etagMD5, tc.checksums)
				}
				if tc.noMultipart && caps.MultipartChecksum {
					t.Errorf("%+v: want no multipart checksum", caps)
				}
				ch, err := caps.Choose()
				switch {
				case tc.refused:
					if !errors.Is(err, s3store.ErrNoVerification) {
						t.Fatalf("choice %+v, %v: want ErrNoVerification", ch, err)
					}
					// The message names the cause and the fix.
					for _, s := range []string{"not the body's MD5", "SSE-KMS", "CRC-64/NVME", "use a bucket without SSE-KMS/SSE-C"} {
						if !strings.Contains(err.Error(), s) {
							t.Errorf("%q does not say %q", err, s)
						}
					}
				case err != nil:
					t.Fatal(err)
				case ch.Verification.ByChecksum != tc.byChecksum:
					t.Errorf("choice %+v, want by checksum %v", ch, tc.byChecksum)
				case tc.byChecksum && ch.Direct != caps.DefaultChecksum:
					t.Errorf("choice %+v: direct uploads only where the store checksums a PUT made without one (%v)", ch, caps.DefaultChecksum)
				case tc.noMultipart && (ch.Multipart || !strings.Contains(ch.Why, "every object is one PUT")):
					t.Errorf("choice %+v: want no multipart uploads, and why", ch)
				}
			})
		}
	})
}

// The probe's objects are under a prefix no job can have.
func TestProbePrefixIsReserved(t *testing.T) {
	if !strings.HasPrefix(s3store.ProbePrefix, upload.ReservedDir) || strings.HasPrefix(s3store.ProbePrefix, upload.UploadsPrefix) {
		t.Fatalf("ProbePrefix %q", s3store.ProbePrefix)
	}
}

// A backend that awaits its probe (the control plane's: it serves while it
// probes) does nothing before the probe chose: a write waits, then fails
// with ErrNotProbed and leaves nothing; the probe's own requests go
// through; once the choice is in use, everything does.
func TestAwaitProbe(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		bucket := v.NewBackend(t, "")
		b, err := s3store.NewS3Backend(s3store.S3Options{Endpoint: v.Endpoint, AccessKey: v.Access, SecretKey: v.Secret, Region: "us-east-1",
			Bucket: bucket.Bucket, AwaitProbe: true})
		if err != nil {
			t.Fatal(err)
		}
		if b.DirectUploads() {
			t.Error("direct uploads offered before the probe chose")
		}
		body := data(64, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err = b.Put(ctx, "job/early", bytes.NewReader(body), int64(len(body)))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a Put before the probe: %v, want it held until its context ended", err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err = b.CreateMultipart(ctx, "job/early-parts")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a CreateMultipart before the probe: %v, want it held until its context ended", err)
		}
		start := time.Now()
		if _, err := b.Head(t.Context(), "job/early"); !errors.Is(err, s3store.ErrNotProbed) {
			t.Fatalf("a Head before the probe: %v, want ErrNotProbed", err)
		}
		if waited := time.Since(start); waited < s3store.ProbeWait {
			t.Errorf("ErrNotProbed after %s, want it after waiting ProbeWait (%s)", waited, s3store.ProbeWait)
		}
		caps, err := b.Probe(t.Context(), nil)
		if err != nil {
			t.Fatalf("the probe through a backend that awaits it: %v", err)
		}
		ch, err := caps.Choose()
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.Probed():
			t.Fatal("Probed closed before Use")
		default:
		}
		b.Use(ch)
		<-b.Probed()
		if keys, err := bucket.List(t.Context(), "job/"); err != nil || len(keys) != 0 {
			t.Fatalf("the store holds %v (%v) after the refused writes", keys, err)
		}
		if ups, err := bucket.ListMultipartUploads(t.Context(), "job/"); err != nil || len(ups) != 0 {
			t.Fatalf("the store holds uploads %+v (%v) after the refused writes", ups, err)
		}
		if _, err := b.Put(t.Context(), "job/late", bytes.NewReader(body), int64(len(body))); err != nil {
			t.Fatalf("a Put after Use: %v", err)
		}
		if b.DirectUploads() != ch.Direct {
			t.Errorf("direct uploads %v after Use, want the choice's %v", b.DirectUploads(), ch.Direct)
		}
	})
}
