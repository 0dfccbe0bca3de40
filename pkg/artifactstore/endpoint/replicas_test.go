package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// Two control-plane replicas (two Handlers, each with its own per-key
// locks) on one store, as the probe configured it: PUTs of the same keys
// through both at once, then both promoting at once. What the final keys
// hold must be exactly what the verified manifest lists; no PUT answered
// 200 may have been lost to another's overwrite of a free key.
func TestTwoReplicasOneKey(t *testing.T) {
	storetest.EachS3(t, func(t *testing.T, v *storetest.S3) {
		b := v.NewBackend(t, "")
		caps, err := b.Probe(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := caps.Choose()
		if err != nil {
			t.Fatal(err)
		}
		b.Use(ch)
		t.Logf("%v: conditional PUT %v, conditional copy %v", v.Impl, ch.ConditionalPut, ch.ConditionalCopy)
		var final atomic.Bool // the binding's artifacts are final (promoting)
		replica := func() *env {
			return newEnv(t, b, func(h *Handler, _ *httptest.Server) {
				h.Store = store.New(b, store.Options{})
				next := h.Authorize
				h.Authorize = func(ctx context.Context, token binding.Token) (Job, error) {
					j, err := next(ctx, token)
					if final.Load() && j.JobID == "job-a" {
						j.Writable, j.State = false, "Finishing/PromotingArtifacts"
					}
					return j, err
				}
			})
		}
		replicas := []*env{replica(), replica()}
		keys := []string{"k0", "k1", "k2"}
		version := func(key string, i int) []byte { return data(40<<10+i, byte(i)+key[1]) }

		// putRetried is a sidecar's PUT: retried while the server asks to.
		putRetried := func(r *env, key string, body []byte) error {
			var err error
			for range 20 {
				if _, err = r.put(r.minio(tokenA, nil), "job-a/"+key, body); err == nil {
					return nil
				}
				if minio.ToErrorResponse(err).StatusCode != 503 {
					return err
				}
				time.Sleep(20 * time.Millisecond)
			}
			return err
		}

		// 1. Eight versions of each key at once, through both replicas.
		var mu sync.Mutex
		answered := map[string]map[string]bool{}
		var wg sync.WaitGroup
		for _, k := range keys {
			answered[k] = map[string]bool{}
			for i := range 8 {
				wg.Go(func() {
					body := version(k, i)
					if err := putRetried(replicas[i%2], k, body); err != nil {
						t.Errorf("PUT %s version %d: %v", k, i, err)
						return
					}
					mu.Lock()
					answered[k][md5hex(body)] = true
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		for _, k := range keys {
			f, p := replicas[0].head("job-a/"+k), replicas[0].head(objects.PendingKey("job-a/"+k))
			if f == nil || !answered[k][f.ETag] || p != nil && (!answered[k][p.ETag] || p.ETag == f.ETag) {
				t.Fatalf("%s: final %+v pending %+v; want versions answered 200, different", k, f, p)
			}
		}

		// A key's final object is written once, when it is free: every
		// later version goes pending. Two replicas that both saw it free
		// must not both have stored there (one would have overwritten the
		// other's answered upload).
		for _, k := range keys {
			n := 0
			for _, r := range replicas {
				r.mu.Lock()
				for line := range strings.SplitSeq(r.logs.String(), "\n") {
					if strings.Contains(line, `"msg"="artifact stored"`) && strings.Contains(line, `"target"="job-a/`+k+`"`) {
						n++
					}
				}
				r.mu.Unlock()
			}
			if n != 1 {
				t.Errorf("%s: %d PUTs were stored at the final key, want 1 (the rest pending)", k, n)
			}
		}

		// 2. The sidecar's last upload of each key, then its manifest.
		files := map[string][]byte{}
		for j, k := range keys {
			files[k] = version(k, 100)
			if err := putRetried(replicas[j%2], k, files[k]); err != nil {
				t.Fatal(err)
			}
		}
		raw := manifestWith(t, files, true)
		if st, ok := replicas[1].putManifest(raw); st != 200 || ok != "true" {
			t.Fatalf("manifest: %d verified %q", st, ok)
		}

		// 3. Final: both replicas promote at once, while late PUTs (refused)
		// come in through both.
		final.Store(true)
		errs := make([]error, 2)
		for i, r := range replicas {
			wg.Go(func() {
				_, errs[i] = r.h.Store.Promote(context.Background(), "job-a", []pending.VerifiedManifest{{Rank: 0, SHA256: verify.ManifestDigest(raw)}})
			})
			wg.Go(func() {
				for _, k := range keys {
					if _, err := r.put(r.minio(tokenA, nil), "job-a/"+k, version(k, 200+i)); err == nil {
						t.Errorf("a PUT of %s was taken after the artifacts became final", k)
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			var nl *pending.NotAsListedError
			if err != nil && !errors.As(err, &nl) {
				t.Errorf("replica %d: promote: %v", i, err)
			}
		}
		if errs[0] != nil && errs[1] != nil {
			t.Fatalf("neither replica promoted: %v; %v", errs[0], errs[1])
		}
		for k, body := range files {
			f := replicas[0].head("job-a/" + k)
			if f == nil || f.ETag != md5hex(body) || f.CRC64NVME != upload.CRC64NVMEOf(body) {
				t.Errorf("%s holds %+v, the verified manifest lists %s", k, f, md5hex(body))
			}
			if p := replicas[0].head(objects.PendingKey("job-a/" + k)); p != nil {
				t.Errorf("%s: pending %+v left after promotion", k, p)
			}
		}
		if m := replicas[0].head("job-a/manifest.json"); m == nil || m.ETag != md5hex(raw) {
			t.Errorf("manifest.json holds %+v, not the verified manifest %s", m, fmt.Sprint(md5hex(raw)))
		}
	})
}
