package binding

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/sidecar/artifacts"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestChangedFileNeverBecomesTheObject appends to a file while its first
// PUT is on the way. That body is never completed (the sidecar checks the
// file before handing over its last bytes), so the server keeps nothing of
// it: the object is the file's final content, stored directly (no pending
// object, which a failed trainer would leave behind), and the verified
// counters count the final bytes only.
func TestChangedFileNeverBecomesTheObject(t *testing.T) {
	j := newJob(t, nil)
	j.write(t, "log.txt", []byte("first line\n"))
	var once sync.Once
	cfg := j.clientConfig()
	up, err := artifacts.NewUploader(artifacts.UploaderConfig{ServerURL: cfg.ServerURL, JobID: cfg.JobID, TokenFile: j.tokenFile, PodTokenFile: j.podTokenFile, CAFile: j.caFile, PodUID: cfg.Pod.UID,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if r.Method == http.MethodPut {
					once.Do(func() {
						f, err := os.OpenFile(filepath.Join(j.artifactDir, "log.txt"), os.O_APPEND|os.O_WRONLY, 0)
						if err != nil {
							t.Error(err)
							return
						}
						_, _ = f.WriteString("second line\n")
						f.Close()
					})
				}
				return rt.RoundTrip(r)
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(j.artifactDir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	filesBefore := counter(t, "tether_artifacts_verified_files_total")
	bytesBefore := counter(t, "tether_artifacts_verified_bytes_total")
	refusedBefore := counter(t, `tether_binding_refusals_total{reason="artifact_incomplete_body"}`)

	res, err := up.UploadFile(context.Background(), root, "log.txt")
	if err != nil {
		t.Fatal(err)
	}
	const want = "first line\nsecond line\n"
	if res.Attempts != 2 || res.Size != int64(len(want)) {
		t.Errorf("result %+v, want the new content verified on attempt 2", res)
	}
	key := cfg.JobID + "/log.txt"
	if got := string(stored(t, key)); got != want {
		t.Errorf("stored %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(env.ArtifactDir, filepath.FromSlash(objects.PendingKey(key)))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a pending object exists (%v): the rejected first body was kept as the final object", err)
	}
	if d := counter(t, "tether_artifacts_verified_files_total") - filesBefore; d != 1 {
		t.Errorf("verified files +%v, want +1", d)
	}
	if d := counter(t, "tether_artifacts_verified_bytes_total") - bytesBefore; d != float64(len(want)) {
		t.Errorf("verified bytes +%v, want +%d (the final content only)", d, len(want))
	}
	if d := counter(t, `tether_binding_refusals_total{reason="artifact_incomplete_body"}`) - refusedBefore; d != 1 {
		t.Errorf("incomplete-body refusals +%v, want +1 (the withheld first body)", d)
	}
}
